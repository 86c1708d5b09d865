// A page on @langchain/langgraph-sdk/react's useStream (the runs API: /threads/{id}/runs/stream),
// as agent-chat-ui uses it: interrupts answered with a `command: {resume}`.
import { createRoot } from "react-dom/client";
import { useState } from "react";
import { useStream } from "@langchain/langgraph-sdk/react";
import { Chat, params, runConfig } from "./shared.jsx";

function App() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const stream = useStream({
    apiUrl: params.get("api"),
    assistantId: params.get("assistant"),
    threadId,
    onThreadId: setThreadId,
    messagesKey: "messages",
  });
  return (
    <>
      <p data-testid="thread">{threadId ?? ""}</p>
      <Chat
        stream={stream}
        onSend={(text) =>
          stream.submit(
            { messages: [{ type: "human", content: text }] },
            { config: runConfig, streamMode: ["values", "messages-tuple"] },
          )
        }
        onAnswer={(value) => stream.submit(undefined, { command: { resume: value } })}
      />
    </>
  );
}

createRoot(document.getElementById("root")).render(<App />);
