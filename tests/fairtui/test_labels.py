"""Group labels in the terminal's tables: folded after a hyphen, never mid-word (#88 item 3)."""

from __future__ import annotations

from tests.conftest import ROOT, fairtui_cmd


def test_a_label_folds_after_a_hyphen_and_cuts_only_a_word_wider_than_the_column():
    from fairtui.runs.usertext import fold_label

    assert fold_label("cifar10-cpu-quick-teacher", 24) == "cifar10-cpu-quick-\nteacher"
    assert fold_label("cifar10-cpu-quick-trades", 24) == "cifar10-cpu-quick-trades"  # it fits
    assert fold_label("dafa (method.dafa_lambda=2.0)", 16) == "dafa\n(method.dafa_\nlambda=2.0)"
    assert fold_label("a" * 30, 12) == "a" * 12 + "\n" + "a" * 12 + "\n" + "a" * 6


def test_the_per_class_table_of_the_quick_protocol_breaks_labels_between_words(tmp_path):
    """Found on the walk: `cifar10-cpu-quick-trad` / `es` in compare's per-class table."""
    out = fairtui_cmd("compare", "--results", str(ROOT / "experiments/results/cifar10-cpu-quick"), "--by", "profile",
                      "--baseline", "cifar10-cpu-quick-trades", "--checkpoint", "last", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr[-1500:]
    lines = out.stdout.splitlines()
    firsts = [line.split()[0] for line in lines if line.strip()]
    assert "cifar10-cpu-quick-trades" in firsts and "cifar10-cpu-quick-" in firsts and "teacher" in firsts
    assert not any(word in firsts for word in ("es", "r", "her", "d"))  # the ends of labels cut mid-word
    assert max(len(line) for line in lines) <= 80
