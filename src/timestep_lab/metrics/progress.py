"""A progress bar over the stages of a scoring command (one step per tool: torch-fidelity,
clean-fid), shown on stderr unless the command got ``--no-progress``."""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

__all__ = ["stages"]


def stages(items: Sequence[str], desc: str, progress: bool) -> Iterable[str]:
    """``items`` in order; with ``progress`` behind a tqdm bar that names the running stage."""
    return _bar(items, desc) if progress else items


def _bar(items: Sequence[str], desc: str) -> Iterator[str]:
    from tqdm.auto import tqdm  # only when a bar is asked for

    with tqdm(total=len(items), desc=desc, unit="tool", dynamic_ncols=True) as bar:
        for item in items:
            bar.set_postfix_str(item)
            yield item
            bar.update(1)
