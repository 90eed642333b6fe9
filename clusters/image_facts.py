"""What a machine image is, as the surfaces show it: the facts each provider reports for the
images its machines can start (clusters.images reads them from the providers)."""

from __future__ import annotations

from dataclasses import dataclass

# What each image is, in a customer's words (the recipes are clusters/providers/local/images.py).
DESCRIPTIONS = {
    "base": "Debian with Slurm, Open MPI and mpi4py, Ray, Python with venv and pip, and the usual tools; "
            "root can apt-get and pip install.",
    "pytorch": "base plus PyTorch in the system's Python.",
}


@dataclass(frozen=True)
class ImageFacts:
    """One image an offer can start, as the surfaces show it."""

    name: str
    os: str  # "Debian 12 (bookworm)"
    python: str | None  # "3.11.2"
    pytorch: str | None = None  # "2.13.0"; None: the image has no PyTorch
    cuda: str | None = None  # "12.4" where the build is a CUDA one; None: a CPU build or no PyTorch

    @property
    def description(self) -> str:
        return DESCRIPTIONS.get(self.name, "")

    @property
    def summary(self) -> str:
        """One line of facts: "Debian 12 (bookworm) · Python 3.11.2 · PyTorch 2.13.0 (CPU)"."""
        parts = [self.os]
        if self.python:
            parts.append(f"Python {self.python}")
        if self.pytorch:
            parts.append(f"PyTorch {self.pytorch} " + (f"(CUDA {self.cuda})" if self.cuda else "(CPU)"))
        return " · ".join(parts)

    def as_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "os": self.os, "python": self.python, "pytorch": self.pytorch, "cuda": self.cuda,
                "description": self.description, "summary": self.summary}
