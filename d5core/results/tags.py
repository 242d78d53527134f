"""Tags on runs: short free-text names a user gives runs when making them
(``d5 bench op ... --tag baseline``), so that ``d5 report --tag baseline`` and
``d5 results list --tag baseline`` find them again.

A tag is any printable text of 1 to :data:`MAX_TAG_LENGTH` characters without leading or
trailing blanks: quotes, angle brackets and non-ASCII letters are allowed (they are
escaped wherever a tag is shown); control characters are not.
"""

from __future__ import annotations

from collections.abc import Iterable

from d5core.errors import UsageError

__all__ = ["MAX_TAG_LENGTH", "check_tag", "check_tags"]

#: The longest tag d5 stores.
MAX_TAG_LENGTH = 100


def check_tag(tag: object) -> str:
    """``tag`` if it is a valid tag.

    :raises UsageError: naming the tag and what is wrong with it.
    """
    if not isinstance(tag, str):
        raise UsageError(f"a tag must be text, got {tag!r}")
    if not tag.strip():
        raise UsageError("a tag must not be empty; give --tag a name such as 'baseline'")
    if tag != tag.strip():
        raise UsageError(f"tag {tag!r} starts or ends with blanks; remove them")
    if len(tag) > MAX_TAG_LENGTH:
        raise UsageError(
            f"tag {tag[:20]!r}... has {len(tag)} characters; at most {MAX_TAG_LENGTH} are kept"
        )
    if not tag.isprintable():
        raise UsageError(f"tag {tag!r} holds control characters; use printable text only")
    return tag


def check_tags(tags: Iterable[object]) -> tuple[str, ...]:
    """The valid tags of ``tags``, each once, in the order first given.

    :raises UsageError: at the first invalid tag.
    """
    seen: dict[str, None] = {}
    for tag in tags:
        seen.setdefault(check_tag(tag), None)
    return tuple(seen)
