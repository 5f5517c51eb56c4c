"""Streaming a Ray job's driver log into the task log without repeating lines.

The Job API returns the whole log on every ``GET /api/jobs/{id}/logs``. The caller keeps an *offset*:
the number of characters of that text already emitted. Each poll emits only complete lines past the
offset (a line still being written waits for its newline), and the final poll of a finished job
emits the rest. The offset is a plain int, so it travels through the trigger's kwargs and its event,
and ``execute_complete`` continues exactly where the trigger stopped.
"""

from __future__ import annotations

DEFAULT_TAIL_LINES = 50
#: Lines of context a re-attached try shows again (the earlier try's task log has everything before).
REATTACH_CONTEXT_LINES = 20

#: Prefix of every streamed job-log line in the task log.
LOG_PREFIX = "[ray job] "


def new_log_lines(text: str, offset: int, *, final: bool = False) -> tuple[list[str], int]:
    """Return the lines of ``text`` not yet emitted and the new offset.

    :param text: the full log as the Job API returned it.
    :param offset: characters already emitted.
    :param final: the job has finished: emit a trailing line that has no newline too.
    :returns: ``(lines, new_offset)``; lines carry no line endings.
    """
    if offset < 0 or offset > len(text):
        # The log was rotated or truncated under us (or the offset is bogus): start over at its end
        # for safety rather than dumping it all again.
        offset = len(text) if offset > len(text) else 0
    pending = text[offset:]
    if not pending:
        return [], offset
    if final:
        return pending.splitlines(), len(text)
    cut = pending.rfind("\n")
    if cut < 0:
        return [], offset
    return pending[: cut + 1].splitlines(), offset + cut + 1


def tail(text: str, lines: int = DEFAULT_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log."""
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def resume_offset(text: str, context_lines: int = REATTACH_CONTEXT_LINES) -> int:
    """Where a re-attached try starts streaming: the last ``context_lines`` complete lines of ``text``.

    An earlier try of the task instance streamed the log into its own task log (how far is not known
    across tries), so a retry shows a little context instead of the whole log again.
    """
    complete = text[: text.rfind("\n") + 1]
    starts = [0, *(i + 1 for i, char in enumerate(complete[:-1]) if char == "\n")]
    return starts[-context_lines] if 0 < context_lines < len(starts) else 0
