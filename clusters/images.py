"""Machine images as a product fact: which images an offer can start, with what a customer
reads about each (OS, Python, PyTorch, CUDA), and which one a cluster gets when it names none
(docs/nodeops.md, "Images on every surface").

Each provider reports the images its machines of a machine type can start *now*
(`Provider.images`): the local provider the images built on this computer, read from the built
root filesystem; the simulated provider a fixed list; a driver whose machines run their
operator's own system (the `ssh` pool) none. This module is the one place the surfaces (the
create page, the API, the CLI and MCP through the API) and the rules read them from.
"""

from __future__ import annotations

from clusters.errors import ClusterError
from clusters.image_facts import ImageFacts
from offers.models import MachineType

# The image a cluster gets when it names none, where the offer can start it; otherwise the
# offer's first.
DEFAULT_IMAGE = "pytorch"


def offer_images(machine_type: MachineType) -> list[ImageFacts] | None:
    """The images this offer's machines can start now, in the provider's order; None when its
    machines run their operator's own system and start no image (the `ssh` pool)."""
    from clusters.providers import get_provider

    return get_provider(machine_type.provider).images(machine_type)


def default_image(images: list[ImageFacts] | None) -> str:
    """DEFAULT_IMAGE where offered, else the offer's first; "" when it starts no image."""
    names = [image.name for image in images or []]
    if DEFAULT_IMAGE in names:
        return DEFAULT_IMAGE
    return names[0] if names else ""


def image_problem(offered: list[ImageFacts] | None, image: str | None) -> ClusterError | None:
    """Why an offer whose machines start `offered` (offer_images) cannot start `image` (None or
    "": the default), if it cannot."""
    if offered is None:
        if not image:
            return None
        return ClusterError(
            "image_unavailable",
            "This offer's machines run their operator's own system and start no image: leave the image out.",
            field="image",
        )
    names = [found.name for found in offered]
    if not names:
        return ClusterError(
            "image_unavailable",
            "This offer has no machine image ready to start now. Pick another offer, or try again later.",
            field="image",
        )
    if not image or image in names:
        return None
    return ClusterError(
        "image_unavailable", f"This offer cannot start the image {image!r}. Pick one of: {', '.join(names)}.",
        field="image",
    )
