"""Serves a GGUF model with llama.cpp's own OpenAI-compatible server (the `xllamacpp` wheel).

    python scripts/serve_local_model.py --model FILE [--port 8080] [--ctx 32768]
        [--template fixed|stock] [--print-template]

Prints one line `listening http://127.0.0.1:PORT/v1` once the server answers `/health`, then
serves until SIGTERM/SIGINT. Only loopback is bound.

`--template fixed` (the default) renders the model's own chat template with one change for
Qwen2.5-Coder: that model writes tool calls as bare JSON, never inside the `<tool_call>` tags its
stock template asks for, so with the stock template llama.cpp parses no call at all. The fixed
template asks for bare JSON and renders earlier calls as bare JSON, which is what llama.cpp then
expects. `--template stock` keeps the template in the file (every call then comes back as text,
which the service recovers: useful to test that path).
"""

import argparse
import signal
import struct
import sys
import threading
import time
import urllib.request


def read_gguf_string_field(path, wanted):
    """The string value of metadata key `wanted` in a GGUF file (None when absent)."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise SystemExit(f"{path} is not a GGUF file")
        (version,) = struct.unpack("<I", f.read(4))
        if version < 2:
            raise SystemExit(f"GGUF version {version} is too old")
        _tensors, kv_count = struct.unpack("<QQ", f.read(16))

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8", "replace")

        def skip(kind):
            if kind == 8:
                string()
            elif kind == 9:
                item, n = struct.unpack("<IQ", f.read(12))
                for _ in range(n):
                    skip(item)
            else:
                f.read(struct.calcsize("<" + scalar[kind]))

        for _ in range(kv_count):
            key = string()
            (kind,) = struct.unpack("<I", f.read(4))
            if key == wanted and kind == 8:
                return string()
            skip(kind)
    return None


# The three places that change in Qwen2.5's template (as the GGUF stores it: inside Jinja
# strings, so `\n` and `\"` are literal backslash sequences here).
OLD_INSTRUCTION = (
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}}\\n</tool_call>"
)
NEW_INSTRUCTION = (
    "To call a function, reply with only a json object with the function name and arguments, "
    "like this:\\n{{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}}"
)
OLD_CALL_OPEN = "'\\n<tool_call>\\n{\"name\": \"'"
NEW_CALL_OPEN = "'\\n{\"name\": \"'"
OLD_CALL_CLOSE = "'}\\n</tool_call>'"
NEW_CALL_CLOSE = "'}'"


def fixed_template(stock):
    changes = [
        (OLD_INSTRUCTION, NEW_INSTRUCTION),
        (OLD_CALL_OPEN, NEW_CALL_OPEN),
        (OLD_CALL_CLOSE, NEW_CALL_CLOSE),
    ]
    missing = [old for old, _ in changes if old not in stock]
    if missing:
        print(f"warning: not Qwen2.5's template ({len(missing)} of 3 places not found); "
              "serving it unchanged", file=sys.stderr)
        return stock
    for old, new in changes:
        stock = stock.replace(old, new)
    return stock


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx", type=int, default=32768)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--template", choices=["fixed", "stock"], default="fixed")
    parser.add_argument("--print-template", action="store_true")
    args = parser.parse_args()

    if args.port == 0:
        import socket
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]

    stock = read_gguf_string_field(args.model, "tokenizer.chat_template") or ""
    template = fixed_template(stock) if args.template == "fixed" else stock
    if args.print_template:
        print(template)
        return

    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx
    # Two slots sharing one KV cache: two researchers (or two page summaries) alternate on the
    # server without each evicting the other's cached prompt, and llama.cpp batches both.
    params.n_parallel = args.parallel
    params.kv_unified = True
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.port = args.port
    params.sampling.temp = 0.0
    params.use_jinja = True
    params.chat_template = template
    server = xlc.Server(params)
    # llama.cpp binds loopback unless told otherwise; refuse to serve on anything else.
    address = str(server.listening_address)
    if "127.0.0.1" not in address and "localhost" not in address:
        raise SystemExit(f"the model server listens on {address}, not on loopback")

    url = f"http://127.0.0.1:{args.port}"
    deadline = time.time() + 300
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:
            pass
        if time.time() > deadline:
            raise SystemExit("the model server did not become healthy within 300 s")
        time.sleep(0.5)
    print(f"listening {url}/v1", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    del server


if __name__ == "__main__":
    main()
