"""One exception type for problems the user can fix.

The CLI prints these as a single line (no traceback): the message must name the problem and the fix.
Anything else that escapes is a bug and keeps its traceback.
"""


class PipelineError(Exception):
    """A user-facing error: bad config, bad data, missing artifact, unsupported model."""
