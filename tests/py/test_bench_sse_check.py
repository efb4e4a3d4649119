"""test_bench_sse_check.py — the stream check of bench/server_load.py (and
bench/server_replay_rss.py): what counts as a failed stream.

Regression for a "truncated stream" report: one stream in a few hundred under the load
bench was reported as ending after its finish chunk without `data: [DONE]`. Recorded whole, the
stream was complete; the trained model had generated the token `error`, so one delta read
`{"reasoning_content":"error","reasoning":"error"}` and the bench's substring test for an
error event (`b'"error"' in data`) fired; the printed message was cut at 200 characters, just
before the `[DONE]`. The check now parses every event: an error is an event object with a
top-level "error" key. Cases: a real stream shape with an `error` delta passes; an error event,
a missing or early [DONE], a non-JSON event fail.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "bench"))
from server_load import sse_problem  # noqa: E402


def event(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def chunk(delta, finish=None):
    return event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                  "model": "m", "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish, "logprobs": None}]})


DONE = b"data: [DONE]\n\n"


def main():
    res = Results()
    head = chunk({"role": "assistant", "content": ""})
    words = [chunk({"reasoning_content": w, "reasoning": w}) for w in [" ._", "error", "s"]]
    final = chunk({}, "length")
    good = head + b"".join(words) + final + DONE
    res.check(b'"error"' in good, "the recorded shape has the token error as a JSON string")
    res.check(sse_problem(good) is None, f"a complete stream with an `error` delta passes "
                                         f"({sse_problem(good)})")
    res.check(sse_problem(head + chunk({"content": "error"}) + final + DONE) is None,
              "content `error` passes too")
    err = event({"error": {"message": "generation failed", "type": "server_error", "code": 500}})
    why = sse_problem(head + err + DONE)
    res.check(why is not None and "error event" in why, f"an error event fails ({why})")
    why = sse_problem(good[:-len(DONE)])
    res.check(why is not None and "[DONE]" in why, f"no [DONE] fails ({why})")
    why = sse_problem(head + DONE + final + DONE)
    res.check(why is not None and "before the end" in why, f"an early [DONE] fails ({why})")
    why = sse_problem(head + b"data: {not json\n\n" + DONE)
    res.check(why is not None and "not JSON" in why, f"a non-JSON event fails ({why})")
    res.check(sse_problem(b"") is not None, "an empty body fails")
    res.done()


if __name__ == "__main__":
    main()
