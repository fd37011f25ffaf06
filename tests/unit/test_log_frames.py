"""`gpuyard logs --rendered`: a progress bar's `\\r` frames folded as a terminal shows them,
the same whole or in chunks cut anywhere."""

from __future__ import annotations

from gpuyard.cli.log_frames import RenderedStream, rendered

LOG = b"epoch 1\n  0%|    |\r 50%|##  |\r100%|####|\nlong frame\rshort\r\nend\r 99%"
SHOWN = b"epoch 1\n100%|####|\nshortframe\n 99%"


def test_a_lines_frames_are_its_last_over_what_is_left_of_the_earlier() -> None:
    assert rendered(LOG) == SHOWN
    assert rendered(b"no bars\nat all\n") == b"no bars\nat all\n"


def test_a_stream_cut_anywhere_renders_as_the_whole() -> None:
    for cut in range(1, len(LOG)):
        stream = RenderedStream()
        out = b"".join(stream.feed(LOG[i : i + cut]) for i in range(0, len(LOG), cut))
        assert out + stream.end() == SHOWN, cut
