"""How d5's internal plugins draw their report sections: each level's ``figures(runs)``
is called through :func:`section_figures`, so that a section that fails costs only its
own figures and the report says why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from d5core.levels.report import ReportFigure

__all__ = ["FigureWarning", "section_figures"]


class FigureWarning(UserWarning):
    """A section of d5's own figures could not be drawn; the report shows the message."""


def section_figures(section: str, draw: Callable[[], Sequence[ReportFigure]]) -> list[ReportFigure]:
    """The figures ``draw()`` makes of d5's section ``section``; none when it raises, the
    failure then issued as a :class:`FigureWarning` (one line, naming the section)."""
    try:
        return list(draw())
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        warnings.warn(
            f"d5's {section} figures could not be drawn: {type(exc).__name__}: {message}",
            FigureWarning,
            stacklevel=2,
        )
        return []
