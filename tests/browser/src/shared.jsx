// What both pages show: the conversation, the pending interrupt with a JSON answer box, the
// final report's length, loading and errors. Selectors are data-testid attributes the driver
// (run.mjs) reads.
import { useEffect, useRef, useState } from "react";

export const params = new URLSearchParams(location.search);

/** The run config the page sends (`?config=<json>`), e.g. plan review on. */
export const runConfig = params.get("config") ? JSON.parse(params.get("config")) : undefined;

function textOf(message) {
  if (typeof message.text === "string") return message.text;
  const content = message.content;
  if (typeof content === "string") return content;
  return (content ?? []).map((b) => b?.text ?? "").join("");
}

function typeOf(message) {
  return typeof message.getType === "function" ? message.getType() : message.type;
}

/** How many times the hook went from idle to loading: a run the page saw start. */
function useLoadingStarts(isLoading) {
  const [starts, setStarts] = useState(0);
  const was = useRef(false);
  useEffect(() => {
    if (isLoading && !was.current) setStarts((n) => n + 1);
    was.current = isLoading;
  }, [isLoading]);
  return starts;
}

export function Chat({ stream, onSend, onAnswer }) {
  const [text, setText] = useState("");
  const [answer, setAnswer] = useState("");
  const loadingStarts = useLoadingStarts(stream.isLoading);
  const report = stream.values?.final_report ?? "";
  return (
    <main>
      <ol data-testid="messages">
        {(stream.messages ?? []).map((m, i) => (
          <li key={m.id ?? i} data-testid="message" data-type={typeOf(m)}>
            {textOf(m)}
          </li>
        ))}
      </ol>
      {stream.interrupt && (
        <section data-testid="interrupt">
          <pre data-testid="interrupt-value">{JSON.stringify(stream.interrupt.value)}</pre>
          <input data-testid="answer" value={answer} onChange={(e) => setAnswer(e.target.value)} />
          <button data-testid="respond" onClick={() => onAnswer(JSON.parse(answer))}>
            Respond
          </button>
        </section>
      )}
      <p data-testid="report-length">{report.length}</p>
      <p data-testid="loading">{stream.isLoading ? "loading" : "idle"}</p>
      <p data-testid="loading-starts">{loadingStarts}</p>
      {stream.error != null && <p data-testid="error">{String(stream.error)}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          onSend(text);
          setText("");
        }}
      >
        <input data-testid="input" value={text} onChange={(e) => setText(e.target.value)} />
        <button data-testid="send" type="submit">Send</button>
      </form>
    </main>
  );
}
