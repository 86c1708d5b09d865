// A page on @langchain/react 1.1.0: its useStream speaks the thread-centric protocol
// (/threads/{id}/commands and /threads/{id}/stream/events), over SSE, or over one WebSocket
// when the page's query says transport=websocket.
import { createRoot } from "react-dom/client";
import { useState } from "react";
import { useStream } from "@langchain/react";
import { Chat, params, runConfig } from "./shared.jsx";

function App() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const stream = useStream({
    apiUrl: params.get("api"),
    assistantId: params.get("assistant"),
    transport: params.get("transport") ?? undefined,
    threadId,
    onThreadId: setThreadId,
  });
  return (
    <>
      <p data-testid="thread">{threadId ?? ""}</p>
      <Chat
        stream={stream}
        onSend={(text) =>
          stream.submit({ messages: [{ type: "human", content: text }] }, { config: runConfig })
        }
        onAnswer={(value) => stream.respond(value)}
      />
    </>
  );
}

createRoot(document.getElementById("root")).render(<App />);
