"""Progress bars on a terminal only: the compile bar of a session's kernels, the calibration bar of
onnxjit.quantization. tqdm is imported only where a bar shows (35 ms)."""
from __future__ import annotations

import sys


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(show: bool, total: int | None, desc: str, unit: str):
    """tqdm's bar on stderr, shown after a second, when `show` and stderr is a terminal; else a no-op with the
    same update/close."""
    if not show or not sys.stderr.isatty():
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, delay=1.0, leave=False)
