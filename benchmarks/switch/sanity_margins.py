"""How firmly each CPU profile's serve keeps its sanity answers, per serve dtype.

For every profile named, under each dtype given: switch to it (the real protocol, in a scratch
PAROCTL_HOME), then for each candidate prompt (completions, and chat through the model's own
template) run the greedy request with the top-5 logprobs of every generated token and report the
answer and its margin: the smallest gap (nats) between the chosen token and the runner-up over
the tokens up to the end of the expected word. A small margin means a different arithmetic path
(another CPU, another dtype) can flip the answer. With --gate, `paroctl gate sanity` then runs
against the same serve and each of its checks' outcome and answer is reported too (its long
recall included, which no margin here covers).

    .venv/bin/python benchmarks/switch/sanity_margins.py --dtype float32 --dtype bfloat16 \
        cpu-demo cpu-demo-paro cpu-demo-int5 cpu-demo-mxfp4 cpu-demo-nvfp4
    PAROCTL_DATA_DIR=tests/data .venv/bin/python benchmarks/switch/sanity_margins.py --gate \
        --out benchmarks/results/FILE.json cpu-demo cpu-demo-paro ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROMPTS = (
    ("The capital of France is", "Paris"),
    ("The largest planet in the solar system is", "Jupiter"),
    ("The opposite of hot is", "cold"),
    ("Water is made of hydrogen and", "oxygen"),
    ("Monday, Tuesday, Wednesday,", "Thursday"),
    ("One, two, three, four,", "five"),
    ("The chemical symbol for gold is", "Au"),
    ("1, 2, 3, 4, 5,", "6"),
    ("A, B, C, D,", "E"),
    ("January, February, March,", "April"),
    ("The sun rises in the", "east"),
)
CHAT_PROMPTS = (
    ("What is the capital of France? Answer in one word.", "Paris"),
    ("What is the opposite of hot? Answer in one word.", "cold"),
    ("What day comes after Monday? Answer in one word.", "Tuesday"),
    ("What color is the sky on a clear day? Answer in one word.", "blue"),
    ("What is the largest planet in the solar system? Answer in one word.", "Jupiter"),
    ("What comes after 1, 2, 3, 4, 5? Answer with a number.", "6"),
    ("Say hello.", "hello"),
)
TOKENS = 8
CHAT_TOKENS = 16


def margin(reply: dict[str, Any], expect: str) -> tuple[str, float | None]:
    """The greedy text and the smallest top-1 minus top-2 logprob gap up to the expected word."""
    choice = reply["choices"][0]
    text = choice["text"]
    lp = choice["logprobs"]
    gaps: list[float] = []
    seen = ""
    for token, top in zip(lp["tokens"], lp["top_logprobs"], strict=True):
        values = sorted(top.values(), reverse=True)
        gaps.append(values[0] - values[1] if len(values) > 1 else float("inf"))
        seen += token
        if expect.lower() in seen.lower():
            return text, min(gaps)
    return text, None


def chat_margin(reply: dict[str, Any], expect: str) -> tuple[str, float | None]:
    """margin() for a chat reply (logprobs.content: one entry per token, each with its top)."""
    choice = reply["choices"][0]
    entries = (choice.get("logprobs") or {}).get("content") or []
    flat = {
        "text": choice["message"].get("content") or "",
        "logprobs": {
            "tokens": [e["token"] for e in entries],
            "top_logprobs": [
                {t["token"] + str(i): t["logprob"] for i, t in enumerate(e["top_logprobs"])}
                for e in entries
            ],
        },
    }
    return margin({"choices": [flat]}, expect)


def gate_checks(env: dict[str, str]) -> list[dict[str, Any]]:
    """Run `paroctl gate sanity` on the live serve; each check's outcome and answer."""
    completed = subprocess.run(
        [sys.executable, "-m", "paroctl", "gate", "sanity"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    print(completed.stdout.strip().splitlines()[-1:] or completed.stderr[-400:], flush=True)
    from paroctl.store.results import open_store

    with open_store() as store:
        (run,) = store.runs(gate="sanity", limit=1)
        items = store.items(run["run_id"])
    return [
        {
            "check": item["key"],
            "outcome": item["outcome"],
            "required": item["required"],
            "text": item.get("answer", item.get("error")),
        }
        for item in items
    ]


def _chosen(prompts: Sequence[tuple[str, str]], words: list[str]) -> Sequence[tuple[str, str]]:
    return [(prompt, expect) for prompt, expect in prompts if not words or expect in words]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+")
    parser.add_argument("--dtype", action="append", default=[], help="serve dtype(s) to try")
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    parser.add_argument("--gate", action="store_true", help="also run `paroctl gate sanity`")
    parser.add_argument(
        "--expect", action="append", default=[], help="only the prompts expecting these words"
    )
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="sanity-margins-")
    os.environ["PAROCTL_HOME"] = home
    from paroctl import state
    from paroctl.client import Client
    from paroctl.profile import profiles
    from paroctl.serve import cpu
    from paroctl.switch import switch as switch_mod

    rows: list[dict[str, Any]] = []
    deps = switch_mod.default_deps()
    try:
        for dtype in args.dtype or ["auto"]:
            for name in args.profiles:
                profile = profiles.load(name)
                # Any answer passes the switch's own sanity check here: this script measures them.
                boot = profile.body.boot.model_copy(update={"sanity_expect": "re:(?s)."})
                serve = profile.body.serve.model_copy(
                    update={"dtype": None if dtype == "auto" else dtype}
                )
                body = profile.body.model_copy(update={"serve": serve, "boot": boot})
                profile = profile.model_copy(update={"body": body})
                plan = cpu.plan_for(profile)
                record = switch_mod.switch(profile, deps, load_profile=profiles.load)
                served = profile.body.model.served_names[0]
                with Client(record.serve.url, timeout_s=120) as client:
                    for prompt, expect in _chosen(PROMPTS, args.expect):
                        reply = client.completion(served, prompt, TOKENS, logprobs=5)
                        text, gap = margin(reply, expect)
                        row = {
                            "profile": name,
                            "dtype": plan.dtype if plan else dtype,
                            "kind": "completion",
                            "prompt": prompt,
                            "expect": expect,
                            "text": text,
                            "margin": None if gap is None else round(gap, 3),
                        }
                        rows.append(row)
                        kept = "MISS" if gap is None else f"{gap:6.3f}"
                        print(
                            f"{name:18} {row['dtype']:9} {kept}  {prompt!r} -> {text!r}", flush=True
                        )
                    for prompt, expect in _chosen(CHAT_PROMPTS, args.expect):
                        messages = [{"role": "user", "content": prompt}]
                        reply = client.chat(
                            served, messages, CHAT_TOKENS, logprobs=True, top_logprobs=5
                        )
                        text, gap = chat_margin(reply, expect)
                        row = {
                            "profile": name,
                            "dtype": plan.dtype if plan else dtype,
                            "kind": "chat",
                            "prompt": prompt,
                            "expect": expect,
                            "text": text,
                            "margin": None if gap is None else round(gap, 3),
                        }
                        rows.append(row)
                        kept = "MISS" if gap is None else f"{gap:6.3f}"
                        print(f"{name:18} chat      {kept}  {prompt!r} -> {text!r}", flush=True)
                if args.gate:
                    for check in gate_checks(dict(os.environ)):
                        rows.append(
                            {
                                "profile": name,
                                "dtype": plan.dtype if plan else dtype,
                                "kind": "gate",
                                **check,
                            }
                        )
                        print(
                            f"{name:18} gate      {check['outcome']:5} {check['check']} -> "
                            f"{check['text']!r}",
                            flush=True,
                        )
                if args.out:  # after every profile: a run cut short keeps what it measured
                    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    finally:  # a failed measurement leaves no serve behind
        if live := state.read_live():
            switch_mod.stop_live(live, deps)


if __name__ == "__main__":
    main()
