"""What a researcher sees of long work: the run's ETA from measured epochs, the phase's from its rate."""

import pytest

from fairtui.runs.runstate import progress_line, run_eta, run_eta_text


def epochs(times, t_last=1000.0):
    return [{"epoch": i + 1, "time_s": t, "t": t_last} for i, t in enumerate(times)]


def test_run_eta_is_the_epochs_left_times_the_recent_epoch_time_less_the_current_epochs_progress():
    # 3 of 10 epochs done at 10, 10 and 13 s; the 4th began 4 s ago
    assert run_eta(epochs([10, 10, 13]), 10, now=1004.0) == pytest.approx(7 * 11 - 4)
    # only the latest 5 epochs count (FRL's fine-tuning epochs are slower than its pre-training)
    assert run_eta(epochs([1] * 20 + [20] * 5), 30, now=1000.0) == pytest.approx(5 * 20)
    assert run_eta([], 10) is None
    assert run_eta(epochs([10, 10]), 2, now=1000.0) == 0.0
    # a slow epoch, or a stop and resume since epoch 10 ended: five epochs left never read 0 s (#56 item 10);
    # at most the current epoch's mean is taken off
    assert run_eta(epochs([10] * 10), 15, now=1030.0) == pytest.approx(4 * 10)
    assert run_eta(epochs([10] * 10), 15, now=1000.0 + 86_400) == pytest.approx(4 * 10)


def test_run_eta_text_says_what_it_covers():
    assert run_eta_text([], 10) == "run ETA after the first epoch"
    assert run_eta_text(epochs([60, 60]), 12, now=1000.0) == "run ETA 10 min 00 s + test evaluation"
    assert run_eta_text(epochs([60, 60]), 2, now=1000.0) == "training done; test evaluation"


def test_phase_eta_from_the_rate_since_the_phase_began():
    text, fraction = progress_line({"phase": "train", "epoch": 2, "batch": 10, "batches": 40, "started": 100.0,
                                    "t": 110.0}, now=110.0)
    assert fraction == 0.25 and text == "train epoch 2: 10/40 batches, 25%, ETA 30 s"


def test_a_resumed_epochs_eta_counts_only_the_batches_trained_since_the_resume():
    """#73 item 5: "261/313 batches, ETA 5 s" with two minutes left: the 250 batches kept from before the stop were
    counted at the new session's rate. Resumed at batch 250, 11 batches in 11 s: 52 left at 1 s each."""
    p = {"phase": "train", "epoch": 2, "batch": 261, "batches": 313, "started": 100.0, "t": 111.0, "first_batch": 250}
    text, _ = progress_line(p, now=111.0)
    assert text.endswith("ETA 52 s"), text
    assert progress_line({**p, "batch": 250}, now=111.0)[0] == "train epoch 2: 250/313 batches, 80%"  # no rate yet


def test_runs_table_shows_a_running_runs_eta_and_its_validation_numbers_marked():
    from fairtui.app.screens.runs_table import row_for

    doc = {"run_id": "20260101-000000-abcdef", "name": "r", "status": "running", "epoch": 3, "epochs": 10,
           "epoch_times": [60.0, 60.0, 60.0], "epoch_t": 1e12, "val": {"avg_robust": 0.5, "worst_robust": 0.25}}
    row = row_for(doc, False)
    assert row[3] == "3/10 ~7m" and row[4:6] == ("0.500v", "0.250v")
    done = {**doc, "status": "completed", "summary": {"best/pgd20": {"avg_robust": 0.4, "worst_robust": 0.2}}}
    assert row_for(done, False)[3:6] == ("3/10", "0.400", "0.200")


def test_an_epoch_line_fits_120_columns():
    from fairtui.runs.report import EPOCH_LEGEND, epoch_line

    event = {"epoch": 130, "epochs": 200, "lr": 0.0001, "time_s": 1234.5, "is_best": True,
             "train": {"loss": 12.3456, "clean_acc": 0.8125, "robust_acc": 0.5125},
             "val": {"avg_clean": 0.8, "avg_robust": 0.5, "worst_robust": 0.25,
                     "robust_acc_per_class": [0.5, 0.25]}}
    line = epoch_line(event, ["airplane", "automobile"])
    assert len(line) <= 120, line
    assert "train 0.812/0.512" in line and "val 0.800/0.500 worst 0.250 (automobile)" in line and line.endswith("*")
    assert "clean/robust" in EPOCH_LEGEND


def test_compare_bars_keep_a_runs_id_whole_and_shorten_its_name():
    from fairtui.app.widgets.bars import fit_label

    assert fit_label("pgd-at-baseline [cccccc]", 18) == "pgd-at-b… [cccccc]"
    assert fit_label("short [abc]", 18) == "short [abc]"
    assert len(fit_label("a-very-long-name-without-an-id", 10)) == 10


def test_sweep_progress_is_short():
    from fairtui.app.screens.runs_table import sweep_progress

    docs = [{"sweep": "sweep-20260101-000000-a1b2c3", "status": s} for s in ("completed", "running", "queued")]
    assert sweep_progress(docs) == "sweep a1b2c3 1/3 done, 1 running"


def test_an_earlier_phases_progress_is_never_shown_as_current(tmp_path):
    """`fairtui eval` after training: progress.json still holds the training's last write until the
    evaluation's engine writes its own; the command does not show it as the evaluation's."""
    import json
    import time

    from rich.console import Console

    from fairtui.launch.follow import _progress_bar, _show_progress

    (tmp_path / "progress.json").write_text(json.dumps({"phase": "test", "attack": "pgd20", "batch": 3,
                                                         "batches": 3, "t": time.time() - 60, "started": 0}))
    bar = _progress_bar(Console(file=open(tmp_path / "out", "w")))
    task = bar.add_task("", total=None, eta="")
    _show_progress(tmp_path, bar, task, since=time.time() - 1)
    assert not bar.tasks[0].visible
    _show_progress(tmp_path, bar, task, since=0.0)
    assert bar.tasks[0].visible and bar.tasks[0].completed == 3


def test_a_dead_evaluations_progress_is_not_live(tmp_path):
    import os

    from fairtui.runs.runfolder import process_alive

    assert process_alive({"pid": os.getpid(), "host": __import__("socket").gethostname()})
    assert not process_alive({"pid": 2 ** 22 + 12345, "host": __import__("socket").gethostname()})
    assert not process_alive({"phase": "eval"})  # written before progress named its writer


def test_a_best_checkpoint_that_is_the_last_gets_one_table_and_cvc_is_explained(tmp_path):
    """The quickstart printed two identical 20-line tables when its best checkpoint was its last, and the CVC
    column was never explained (#56 item 10)."""
    import json

    from fairtui.runs.report import per_class_tables
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.synthetic import make_run

    run = make_run(tmp_path, "r1")
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    last = next(e for e in events if e.get("checkpoint") == "last")
    for e in events:
        if e.get("checkpoint") == "best":
            e.update({k: last[k] for k in ("clean_acc_per_class", "robust_acc_per_class")},
                     cvc_per_class=[0.01] * 10)
    last["cvc_per_class"] = [0.01] * 10
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (table,) = per_class_tables(RunView.load(run))
    assert "test @ last = best (epoch 5)" in table.title
    assert "CVC" in table.caption and "Tian" in table.caption
    differ = make_run(tmp_path, "r2")  # best and last measured apart: two tables
    assert len(per_class_tables(RunView.load(differ))) == 2


def test_the_run_screens_progress_line_puts_the_run_eta_first():
    """At 80 columns the line's end is cut, and it held the run's ETA ("ETA 31 s | run") (#56 item 8)."""
    from fairtui.runs.runstate import progress_header

    p = {"phase": "train", "epoch": 11, "batch": 10, "batches": 20, "started": 990.0, "t": 1000.0}
    text, fraction = progress_header(p, epochs([60] * 10), 15, now=1000.0)
    assert text.startswith("run 5 min 00 s + test · train epoch 11: 10/20")
    assert fraction == 0.5
    evaluating = {**p, "phase": "test", "attack": "pgd20"}
    assert progress_header(evaluating, epochs([60] * 15), 15, now=1000.0)[0].startswith("test pgd20: ")


def test_a_run_says_its_estimated_training_time_once_its_first_batches_are_timed(tmp_path):
    """#73 item 1: the run's first line of estimate, from the rate of its first batches (a resumed epoch's counted
    from the resume), naming what it leaves out."""
    import json

    from fairtui.launch.follow import first_estimate
    from fairtui.runs.synthetic import make_run
    from engine.contract.config import Profile, TrainConfig

    run_dir = make_run(tmp_path, "20260101-000000-est001", status="running", epochs=0,
                       profile=Profile(train=TrainConfig(epochs=5)))
    progress = {"phase": "train", "epoch": 1, "batch": 20, "batches": 100, "started": 100.0, "t": 110.0}
    (run_dir / "progress.json").write_text(json.dumps({**progress, "batch": 2}))
    assert first_estimate(run_dir) is None  # too few batches to time
    (run_dir / "progress.json").write_text(json.dumps(progress))
    line = first_estimate(run_dir)  # 0.5 s a batch: 80 left of this epoch and 4 epochs of 100
    assert line.startswith("estimated: 4 min 00 s of training left (5 epochs of 100 batches at 0.50 s a batch"), line
    assert "the test evaluation come on top" in line
    (run_dir / "progress.json").write_text(json.dumps({**progress, "batch": 70, "first_batch": 50}))
    assert "at 0.50 s a batch, the rate of its first 20" in first_estimate(run_dir)  # resumed at batch 50
