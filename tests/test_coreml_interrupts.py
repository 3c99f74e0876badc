"""Core ML conversion guards that need no conversion."""
from __future__ import annotations

import pytest


def test_a_ctrl_c_swallowed_inside_the_converter_still_stops_the_run():
    """coremltools catches everything around a sympy solve (a bare except), so a Ctrl-C there was lost and the
    export stage finished; keep_interrupts raises it again once convert returns, and restores the handler."""
    import os
    import signal

    from export.coreml import keep_interrupts

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with keep_interrupts():
            try:  # what the converter does
                os.kill(os.getpid(), signal.SIGINT)
                import time
                time.sleep(1)
            except:  # noqa: E722
                pass
    assert signal.getsignal(signal.SIGINT) is before
    with keep_interrupts():
        pass  # no signal: nothing raised
