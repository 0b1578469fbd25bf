"""Where a rehearsal keeps its config and stand-ins, relative to the project root. Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["RehearsalPaths"]


@dataclass(frozen=True)
class RehearsalPaths:
    """Where a rehearsal of study ``name`` keeps its stand-ins (relative to the project root):
    ``<base>/<name>/`` for its own, ``<base>/inception/`` for the random Inception weights every
    rehearsal shares (two ~95 MB files)."""

    base: str = "rehearsal"
    name: str = "study"

    @property
    def root(self) -> PurePosixPath:
        return PurePosixPath(self.base) / self.name

    @property
    def config(self) -> PurePosixPath:
        return self.root / "config.yaml"

    @property
    def raw(self) -> PurePosixPath:
        return self.root / "raw"

    @property
    def prepared(self) -> PurePosixPath:
        return self.root / "prepared"

    @property
    def pretrained(self) -> PurePosixPath:
        return self.root / "pretrained"

    @property
    def inception(self) -> PurePosixPath:
        return PurePosixPath(self.base) / "inception"

    @property
    def vae(self) -> PurePosixPath:
        return self.root / "vae"

    @property
    def features(self) -> PurePosixPath:
        return self.root / "rehearsal-cnn.pt"
