"""How firmly each CPU profile's serve keeps its boot sanity answer, per serve dtype.

For every profile named, under each dtype given: switch to it (the real protocol, in a scratch
PAROCTL_HOME), then for each candidate prompt run the greedy completion with the top-5 logprobs
of every generated token and report the answer and its margin: the smallest gap (nats) between
the chosen token and the runner-up over the tokens up to the end of the expected word. A small
margin means a different arithmetic path (another CPU, another dtype) can flip the answer.

    .venv/bin/python benchmarks/switch/sanity_margins.py --dtype float32 --dtype bfloat16 \
        cpu-demo cpu-demo-paro cpu-demo-int5 cpu-demo-mxfp4 cpu-demo-nvfp4
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
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
)
TOKENS = 8


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+")
    parser.add_argument("--dtype", action="append", default=[], help="serve dtype(s) to try")
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
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
                for prompt, expect in PROMPTS:
                    reply = client.completion(served, prompt, TOKENS, logprobs=5)
                    text, gap = margin(reply, expect)
                    row = {
                        "profile": name,
                        "dtype": plan.dtype if plan else dtype,
                        "prompt": prompt,
                        "expect": expect,
                        "text": text,
                        "margin": None if gap is None else round(gap, 3),
                    }
                    rows.append(row)
                    kept = "MISS" if gap is None else f"{gap:6.3f}"
                    print(f"{name:18} {row['dtype']:9} {kept}  {prompt!r} -> {text!r}", flush=True)
    if live := state.read_live():
        switch_mod.stop_live(live, deps)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
