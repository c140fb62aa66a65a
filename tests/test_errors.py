"""``errors.printable`` and ``errors.one_line``: a path that is not UTF-8 is shown escaped, and
an OSError as ``PATH: cause`` (issue 38, item 4)."""

import errno
import os

from fairseq_shared.errors import FairseqSharedError, one_line, printable, printable_data


def test_bytes_that_are_not_utf8_are_shown_escaped():
    path = os.fsdecode(b"/data/corpus\xff/train.es")  # Python reads the byte as '\udcff'
    assert printable(path) == "/data/corpus\\xff/train.es"
    printable(path).encode("utf-8")  # writable to any UTF-8 file or terminal
    assert printable("año ü") == "año ü"  # real characters stay
    assert printable_data({path: [path, 3, None], "n": (1.5,)}) == {
        "/data/corpus\\xff/train.es": ["/data/corpus\\xff/train.es", 3, None], "n": [1.5]}


def test_one_line_names_the_path_and_the_cause():
    path = os.fsdecode(b"/out\xff/x.pt")
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    assert one_line(error) == "/out\\xff/x.pt: No space left on device"
    moved = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "/a", None, "/b")
    assert one_line(moved) == "/a -> /b: Invalid cross-device link"
    try:
        open(path)
    except OSError as real:
        assert one_line(real) == "/out\\xff/x.pt: No such file or directory"
    assert one_line(FairseqSharedError(f"--data {path}:\n  not a corpus")) == (
        "--data /out\\xff/x.pt: not a corpus")
    assert one_line(OSError("no file")) == "no file" and one_line(ValueError()) == "ValueError"
