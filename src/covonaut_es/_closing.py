"""A base for objects that hold resources and close them at the end of a ``with``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class Closing(ABC):
    """Usable as a context manager: ``with obj:`` closes ``obj`` on the way out."""

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
