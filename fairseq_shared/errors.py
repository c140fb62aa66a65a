"""The base of the plug-in's own errors: bad input that the message fully explains.

Each names the flag or file and the allowed values, so a traceback adds nothing for a user.
fairseq's commands print one of these as one line (``compat.report_checkpoint_errors_in_one_line``);
``FAIRSEQ_SHARED_DEBUG=1`` keeps the traceback."""


class FairseqSharedError(ValueError):
    """Bad input to the plug-in; the message names the flag or file and the allowed values."""
