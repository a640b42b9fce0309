"""The error a command line's bad request raises in library code (an option that cannot run, a run directory that
must not be overwritten, a partition that cannot take the job): entry points print its message as one line and
exit 2 (`cli.user_errors`); a library never exits the process itself."""

__all__ = ["UsageError"]


class UsageError(ValueError):
    """Bad input named in its message, which is complete without the exception's type."""
