"""The base of the plug-in's own errors: bad input that the message fully explains, and how an
error becomes one printable line.

Each names the flag or file and the allowed values, so a traceback adds nothing for a user.
fairseq's commands print one of these as one line (``compat.report_checkpoint_errors_in_one_line``);
``FAIRSEQ_SHARED_DEBUG=1`` keeps the traceback. The package's own commands print
:func:`one_line` of theirs (``cli/errors.py``)."""


class FairseqSharedError(ValueError):
    """Bad input to the plug-in; the message names the flag or file and the allowed values."""


def printable(text) -> str:
    """``text`` with the bytes of a path that is not UTF-8 shown escaped (``\\xff``): Python
    reads such a path's bytes as lone surrogates (``\\udcff``), which no UTF-8 file, report or
    terminal takes."""
    return str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def printable_data(data):
    """``data`` (dicts, lists, tuples, strings, numbers) with every string :func:`printable`:
    for a JSON report, whose text must stay valid JSON."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, dict):
        return {printable_data(k): printable_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [printable_data(v) for v in data]
    return data


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one printable line; an ``OSError`` as ``PATH: cause`` (both
    paths of a rename or link: ``PATH -> PATH2: cause``)."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        where = printable(error.filename) + (
            f" -> {printable(error.filename2)}" if error.filename2 is not None else "")
        text = f"{where}: {error.strerror}"
    else:
        text = printable(error)
    return " ".join(text.split()) or type(error).__name__
