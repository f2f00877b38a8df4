from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

VERSION: str

class StrataError(Exception): ...

class Db:
    def __init__(
        self,
        path: Union[str, Path],
        config: Optional[Union[str, Path]] = None,
        settings: Sequence[Tuple[str, str]] = ...,
    ) -> None: ...
    def ingest_files(
        self,
        scope: str,
        paths: Sequence[Union[str, Path]],
        kind: Optional[str] = None,
        time: Optional[str] = None,
    ) -> str: ...
    def ingest_texts(self, scope: str, texts: Sequence[Tuple[str, str]], time: Optional[str] = None) -> str: ...
    def append(self, scope: str, round: int, speaker: str, text: str, time: Optional[str] = None) -> str: ...
    def compress(self, scope: str) -> str: ...
    def context(
        self,
        scope: str,
        level: str = "auto",
        budget: int = 2000,
        question: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
    ) -> str: ...
    def query(self, scopes: Sequence[str], question: str) -> str: ...
    def grep(self, scopes: Sequence[str], pattern: str, levels: Sequence[str] = ..., limit: int = 20) -> str: ...
    def peek(self, id: str) -> str: ...
    def stats(self) -> str: ...
