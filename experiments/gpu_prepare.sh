#!/usr/bin/env bash
# Before a lent GPU session's device commands (#36), on this machine, in the repository root:
#
#   bash experiments/gpu_prepare.sh [SHARED_DATA_DIR]      (default ../shared/data)
#
# The device machine starts bare (PyTorch there, not fairtui's other dependencies) and reaches no network, so
# this fills two folders that .git/info/exclude ignores, for the device tool to carry (`carry: [".whl", ".gpu"]`):
# - .whl/: the wheels fairtui needs there, for its Python 3.12 (pyautoattack without its 45 MB example model);
# - .gpu/: the CIFAR-10 JPEG pack and its decoder, and HEAD, the commit of the tree being sent (the device's git
#   metadata can be the session's starting checkout: experiments/gpu_call.sh records HEAD beside the runs).
# Run it again before each device command after a commit, so that .gpu/HEAD names the tree that is sent.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
mkdir -p .git/info
for d in /.whl/ /.gpu/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
mkdir -p .whl .gpu
if ! ls .whl/pyautoattack-*.whl > /dev/null 2>&1; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
        pyautoattack==0.2.0 textual==8.2.8 textual-plotext==1.0.1 plotext==5.3.2 tinydb==4.9.0 tomli_w==1.2.0 \
        "typer==0.28.0" mdit-py-plugins platformdirs
    # the wheel's example model and TensorFlow weights: 45 MB that no evaluation loads
    zip -q -d .whl/pyautoattack-*.whl 'pyautoattack/examples/model_test.pt' \
        'pyautoattack/examples/tf_model.weight.h5' || true
fi
[ -f .gpu/cifar10-jpeg.xz ] || cp "$DATA/cifar10-jpeg.xz" .gpu/
cp "$DATA/cifar10_from_jpeg.py" .gpu/
git rev-parse HEAD > .gpu/HEAD
git status --porcelain --untracked-files=no | grep -q . && echo "note: the tree has uncommitted changes (sent as they are)"
du -sh .whl .gpu
echo "HEAD $(cat .gpu/HEAD)"
