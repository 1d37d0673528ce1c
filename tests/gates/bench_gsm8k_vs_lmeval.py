"""Benchmark (a script, not a test): paroctl's gsm8k gate vs `lm_eval` on the same live serve.

Measures wall time and client CPU time (user + system of the client process and its threads) for
the same questions at the same concurrency. lm-eval runs only when --lm-eval names its executable
(installed in a side venv); its stock gsm8k task is pointed at the local files through
HF_DATASETS_OFFLINE and --limit. Usage, with a live serve (`paroctl switch cpu-demo`):

    PAROCTL_DATA_DIR=../shared/data python tests/gates/bench_gsm8k_vs_lmeval.py --limit 200
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from typing import Any


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_paroctl(limit: int, concurrency: int, mode: str) -> dict[str, Any]:
    """One gsm8k gate run in-process: wall and client CPU seconds."""
    from paroctl.gates import run_gate

    start, cpu = time.perf_counter(), _cpu_self()
    result = run_gate("gsm8k", {"limit": limit, "concurrency": concurrency, "mode": mode})
    wall, used = time.perf_counter() - start, _cpu_self() - cpu
    return {
        "tool": "paroctl",
        "wall_s": round(wall, 1),
        "client_cpu_s": round(used, 2),
        "cpu_pct_of_wall": round(100 * used / wall, 2),
        "summary": {k: result.summary[k] for k in ("answered", "truncated", "invalid", "errors")},
        "run_id": result.run_id,
    }


def bench_lm_eval(
    exe: str, base_url: str, model: str, tokenizer: str, limit: int, conc: int
) -> dict[str, Any]:
    """`lm_eval --model local-completions` on the same serve: wall and client CPU seconds."""
    argv = [
        exe, "--model", "local-completions", "--tasks", "gsm8k", "--limit", str(limit),
        "--model_args",
        f"model={model},base_url={base_url}/v1/completions,num_concurrent={conc},"
        f"tokenizer={tokenizer},tokenized_requests=False,max_retries=3",
    ]  # fmt: skip
    start, cpu = time.perf_counter(), _cpu_children()
    subprocess.run(argv, check=True)
    wall, used = time.perf_counter() - start, _cpu_children() - cpu
    return {"tool": "lm_eval", "wall_s": round(wall, 1), "client_cpu_s": round(used, 2),
            "cpu_pct_of_wall": round(100 * used / wall, 2)}  # fmt: skip


def main() -> None:
    """Parse arguments, run the benchmarks, print one JSON line per tool."""
    from paroctl.gates.base import base_url_of, read_target_record

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--mode", choices=["completions", "chat"], default="completions")
    parser.add_argument("--lm-eval", dest="lm_eval", help="path of the lm_eval executable")
    parser.add_argument("--tokenizer", help="tokenizer dir for lm-eval (the served model dir)")
    args = parser.parse_args()
    print(json.dumps(bench_paroctl(args.limit, args.concurrency, args.mode)))
    if args.lm_eval:
        live = read_target_record()
        model = live["served_names"][0]
        result = bench_lm_eval(
            args.lm_eval, base_url_of(live), model, args.tokenizer or model, args.limit,
            args.concurrency,
        )  # fmt: skip
        print(json.dumps(result))


if __name__ == "__main__":
    main()
