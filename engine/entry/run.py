"""The engine process: `python -m engine train | eval | import RUN`, dispatched to its command's module
(engine.entry.train_run, engine.entry.eval_run, engine.entry.imported), each exiting with the protocol's codes (engine.contract.protocol)
(engine.training.process): 0 completed; 1 failed (the reason in `run_finished` and on stderr); 2 a bad
profile; 130 stopped by SIGINT / SIGTERM (last checkpoint kept).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.training.process import EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    import argparse

    from engine.runtime import cpuload

    cpuload.mark()  # the machine's CPU time as the engine starts: is another process keeping the cores busy?

    parser = argparse.ArgumentParser(prog="python -m engine", description="fairtui's training engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the run folder (resumes from its last checkpoint)")
    p_train.add_argument("run_dir", type=Path)
    p_train.add_argument("--nproc", type=int, default=1,
                         help="processes (one per GPU of CUDA_VISIBLE_DEVICES, or CPU processes): DDP")
    p_eval = sub.add_parser("eval", help="evaluate a run's checkpoint under named attacks")
    p_eval.add_argument("run_dir", type=Path)
    p_eval.add_argument("--request", required=True, help="JSON: attacks, checkpoint, split, ...")
    p_import = sub.add_parser("import", help="import the model named by the run folder's [source] table")
    p_import.add_argument("run_dir", type=Path)
    p_import.add_argument("--request", default="{}", help="JSON (reserved)")
    p_check = sub.add_parser("check-weights", help="check that a checkpoint file loads safely (weights only, "
                             "nothing run): exit 0, else 2 with the reason on stderr")
    p_check.add_argument("checkpoint", type=Path)
    args = parser.parse_args(argv)
    if args.command == "check-weights":  # for the command line, which never imports torch itself
        from engine.runtime.checkpoint import CheckpointError, load_checkpoint

        try:
            load_checkpoint(args.checkpoint, need=("model",))
        except CheckpointError as err:
            print(err, file=sys.stderr)
            return EXIT_USAGE
        return 0
    if not (args.run_dir / "profile.toml").exists():
        print(f"{args.run_dir}: not a run folder (no profile.toml)", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "train":
        if args.nproc < 1:
            print(f"--nproc must be at least 1, got {args.nproc}", file=sys.stderr)
            return EXIT_USAGE
        from engine.entry.train_run import train

        return train(args.run_dir, args.nproc)
    if args.command == "import":
        from engine.entry.imported import import_run

        return import_run(args.run_dir, json.loads(args.request))
    from engine.entry.eval_run import evaluate_run

    return evaluate_run(args.run_dir, json.loads(args.request))
