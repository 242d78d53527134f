"""Time and accuracy of every distributed scheme on the digits and synthetic recipes,
with 1, 2 and 4 ranks (4 oversubscribe two cores).

Each cell is one `d5 run RECIPE --ranks N --scheme S --json` (1 rank: plain `d5 run`),
run as a user would run it; the figures are its time to accuracy (MLPerf: from the first
touch of data, on rank 0), final test accuracy, the wall time of the whole job (launch
included) and the bytes rank 0 sent. The global batch grows with the ranks (each rank
takes the recipe's batch), as in data-parallel weak scaling.

    .venv/bin/python benchmarks/schemes.py [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import load, machine

from d5core.cli.output import read_json

ROOT = Path(__file__).resolve().parents[1]
D5 = str(Path(sys.executable).with_name("d5"))
RECIPES = ("digits-mlp", "synthetic-cnn")
SCHEMES = ("allreduce", "parameter-server", "async-parameter-server", "model-averaging", "dpsgd")


def one(recipe: str, ranks: int, scheme: str | None, db: str) -> dict[str, object]:
    cmd = [D5, "run", str(ROOT / "recipes" / f"{recipe}.toml"), "--json", "--db", db]
    if ranks > 1:
        cmd += ["--ranks", str(ranks), "--scheme", str(scheme)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    row: dict[str, object] = {"recipe": recipe, "ranks": ranks, "scheme": scheme or "-",
                              "wall_s": wall, "exit": out.returncode}  # fmt: skip
    try:
        (data,) = read_json(out.stdout, "run")["runs"]
    except ValueError:  # no JSON printed (json.JSONDecodeError is a ValueError)
        row["error"] = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return row
    metrics = data.get("metrics", {})
    row.update(
        status=data.get("status"),
        final_test_accuracy=metrics.get("final_test_accuracy"),
        time_to_accuracy=metrics.get("time_to_accuracy"),
    )
    per_rank = (data.get("distributed") or {}).get("per_rank") or []
    if per_rank:
        row["rank0_bytes_sent"] = per_rank[0].get("rank_bytes_sent")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "schemes.sqlite")
        for recipe in RECIPES:
            rows.append(one(recipe, 1, None, db))
            for ranks in (2, 4):
                for scheme in SCHEMES:
                    rows.append(one(recipe, ranks, scheme, db))
                    print(f"{recipe} {ranks} {scheme}: {rows[-1]}", file=sys.stderr)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return 0
    print(f"machine: {machine()}; {load()}\n")
    print("| recipe | ranks | scheme | status | final test accuracy | time to accuracy (s) "
          "| job wall time (s) | rank 0 bytes sent |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        acc, tta = r.get("final_test_accuracy"), r.get("time_to_accuracy")
        sent = r.get("rank0_bytes_sent")
        print(
            f"| {r['recipe']} | {r['ranks']} | {r['scheme']} | {r.get('status', r.get('error'))} | "
            f"{'-' if acc is None else f'{acc:.3f}'} | {'-' if tta is None else f'{tta:.2f}'} | "
            f"{r['wall_s']:.1f} | {'-' if sent is None else f'{int(sent):,}'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
