"""A multi-turn chat on a session: each turn sends only its new text; the earlier turns stay pinned in
the server's radix cache, so ``cached_tokens`` grows with the conversation.

    python examples/session_chat.py                       # starts a server on the default model
    python examples/session_chat.py --url http://127.0.0.1:30000
    python examples/session_chat.py --interactive         # type your own turns (empty line ends)

The server side is SGLang's session API: ``/open_session``, ``/generate`` with ``session_params``
``{"id": session, "rid": the turn this one continues}``, ``/close_session``.
"""

import argparse
from collections.abc import Iterator

import requests

import radixlm

QUESTIONS = [
    "Hi! My name is Ada. What is a radix tree?",
    "Why is it useful for caching prompts?",
    "Give me one sentence I could put on a slide.",
    "What was my name again?",
    "Thanks, bye!",
]


def user_turn(message: str, first: bool, answer_closed: bool) -> str:
    """The new text of a turn in the ChatML format of the default model (SmolLM2-Instruct). An answer
    that stopped on its end-of-turn token keeps it in the session; one cut by the length limit is
    closed here."""
    if first:
        head = "<|im_start|>system\nYou are a concise, helpful assistant.<|im_end|>\n"
    else:
        head = "\n" if answer_closed else "<|im_end|>\n"
    return f"{head}<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"


def chat(url: str, messages: Iterator[str], max_new_tokens: int = 96) -> None:
    session = requests.post(f"{url}/open_session", json={"capacity_of_str_len": 4096}).json()
    previous: str | None = None
    closed = True
    try:
        for turn, message in enumerate(messages):
            rid = f"{session}-turn-{turn}"
            body = {
                "text": user_turn(message, previous is None, closed),
                "rid": rid,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
                "session_params": {"id": session, "rid": previous},
            }
            reply = requests.post(f"{url}/generate", json=body)
            reply.raise_for_status()
            out = reply.json()
            meta = out["meta_info"]
            print(f"user> {message}\nassistant> {out['text'].strip()}")
            print(f"   [prompt {meta['prompt_tokens']} tokens, {meta['cached_tokens']} from the cache]\n")
            previous = rid
            closed = meta["finish_reason"]["type"] == "stop"
    finally:
        requests.post(f"{url}/close_session", json={"session_id": session})


def typed_messages() -> Iterator[str]:
    while line := input("you> ").strip():
        yield line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running radixlm server (default: start one)")
    parser.add_argument("--model-path", default="smollm2-135m")
    parser.add_argument("--interactive", action="store_true")
    args = parser.parse_args()
    messages = typed_messages() if args.interactive else iter(QUESTIONS)
    if args.url:
        chat(args.url, messages)
        return
    with radixlm.launch_server(model_path=args.model_path) as server:
        chat(server.url, messages)


if __name__ == "__main__":
    main()
