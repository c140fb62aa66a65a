"""What the export writes, and the refusal to write over what it reads (issue 20).

``python -m fairseq_shared.cli.export DIR/checkpoint.pt --out DIR`` used to replace the
training checkpoint (optimizer state, sharing maps) with the plain export; the same holds for
the dictionaries and ``spm.model`` when ``--out`` is the data directory, and for any input
under a directory the export replaces (``ct2/``, ``hf/``)."""

import os
from typing import Dict, Iterable, List

from fairseq_shared.export.plain import ExportError


def planned_files(out_dir: str, dict_names: Iterable[str], ct2_names: Iterable[str],
                  hf: bool) -> Dict[str, List[str]]:
    """``{"files": [...], "dirs": [...]}`` the export writes (dirs are replaced whole)."""
    files = ["checkpoint.pt", "export.json", "spm.model", *dict_names]
    dirs = [*ct2_names] + (["hf"] if hf else [])
    return {"files": [os.path.join(out_dir, f) for f in files],
            "dirs": [os.path.join(out_dir, d) for d in dirs]}


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _files_under(directory: str) -> List[str]:
    if not os.path.isdir(directory) or os.path.islink(directory):
        return []
    return [os.path.join(root, n) for root, _, names in os.walk(directory) for n in names]


def _identity(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def refuse_overwrite(inputs: Dict[str, str], planned: Dict[str, List[str]], out_dir: str) -> None:
    """Raise :class:`ExportError` when a planned output is (or would replace) an input;
    ``inputs``: ``{what it is: path}``."""
    for what, path in inputs.items():
        if not path or not os.path.exists(path):
            continue
        real = _real(path)
        for out in planned["files"]:
            if _real(out) == real:
                raise ExportError(f"--out {out_dir}: the export would overwrite {what} "
                                  f"'{path}' (it writes '{out}'); choose another --out")
        for out in planned["dirs"]:
            if real == _real(out) or real.startswith(_real(out) + os.sep):
                raise ExportError(f"--out {out_dir}: the export would replace '{out}', which "
                                  f"holds {what} '{path}'; choose another --out")
    refuse_replacing_inputs(inputs, out_dir)


def refuse_replacing_inputs(inputs: Dict[str, str], out_dir: str) -> None:
    """Raise :class:`ExportError` when an input is under ``out_dir``, which the export
    replaces whole, or is the same file (device and inode: a hard link or a symlink) as one
    there."""
    present = {what: path for what, path in inputs.items() if path and os.path.exists(path)}
    out_real = _real(out_dir)
    for what, path in present.items():
        if _real(path).startswith(out_real + os.sep):
            raise ExportError(f"--out {out_dir}: holds {what} '{path}', and the export replaces "
                              "the directory whole; choose another --out")
    identities = {_identity(path): (what, path) for what, path in present.items()}
    for inside in _files_under(out_dir):
        found = identities.get(_identity(inside))
        if found is not None:
            what, path = found
            link = "a symlink to" if os.path.islink(inside) else "the same file as (a hard link)"
            raise ExportError(f"--out {out_dir}: '{inside}' is {link} {what} '{path}', and the "
                              "export replaces the directory whole; choose another --out")
