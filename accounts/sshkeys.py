"""SSH public keys as the product accepts them: one key type, one blob, an optional plain comment.

A key ends up as a line of a node's `authorized_keys`, a file sshd reads with options
(`command="…"`, `no-pty`, …) and one key per line. So a key is parsed for real with
`cryptography` (the blob must decode to a key of the type the line names), and anything
else a line could carry — options before the type, a second key after a `;` or a newline,
control characters, shell or marker text in the comment — is refused, not cleaned up.
What is stored is the canonical form rebuilt from the parsed key, and nodes receive each
key base64-encoded on its own (`node_payload`), so no character of a key can split it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_ssh_public_key
from django.core.exceptions import ValidationError

logger = logging.getLogger(__name__)

KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
)
MAX_LENGTH = 16 * 1024  # an RSA-16384 public key line is ~2.8 KB
# A comment is a label (user@laptop, "work key 2"): letters, digits, spaces and a few
# punctuation marks. No quotes, `;`, `#`, `$`, backslashes or anything a shell or sshd reads.
COMMENT = re.compile(r"[A-Za-z0-9@._+=:,/()\- ]{1,100}")
MIN_RSA_BITS = 2048

EXAMPLE = "ssh-ed25519 AAAA… you@laptop"


@dataclass(frozen=True)
class PublicKey:
    key_type: str
    blob: bytes
    comment: str

    @property
    def line(self) -> str:
        """The canonical authorized_keys line: type, base64 blob, comment if any."""
        encoded = base64.b64encode(self.blob).decode()
        return f"{self.key_type} {encoded} {self.comment}" if self.comment else f"{self.key_type} {encoded}"

    @property
    def fingerprint(self) -> str:
        """The SHA256 fingerprint `ssh-keygen -lf` prints."""
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"


def parse_public_key(text: str) -> PublicKey:
    """The key in `text`, or ValidationError saying what is wrong with it."""
    text = text.strip()
    if not text:
        raise ValidationError(f"Paste a public key line, e.g. '{EXAMPLE}'.")
    if len(text) > MAX_LENGTH:
        raise ValidationError("That is too long for a public key.")
    if any(ord(char) < 0x20 and char != "\t" or ord(char) == 0x7F for char in text):
        raise ValidationError("Paste exactly one key on one line (no line breaks or control characters).")
    parts = text.split(None, 2)
    if parts[0] not in KEY_TYPES:
        if any(key_type in text for key_type in KEY_TYPES):
            raise ValidationError("Paste the key without options in front of it (no command=, from=, no-pty, …).")
        raise ValidationError("Unsupported key type; use ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256/384/521.")
    if len(parts) < 2:
        raise ValidationError(f"Paste the whole public key line, e.g. '{EXAMPLE}'.")
    key_type, encoded = parts[0], parts[1]
    comment = " ".join(parts[2].split()) if len(parts) == 3 else ""
    if comment and not COMMENT.fullmatch(comment):
        raise ValidationError(
            "The key's comment may hold letters, digits, spaces and @ . _ + = : , / ( ) - only."
        )
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (ValueError, binascii.Error):
        raise ValidationError("The key's base64 part is not valid.") from None
    try:
        key = load_ssh_public_key(f"{key_type} {encoded}".encode())
    except (ValueError, UnsupportedAlgorithm):
        raise ValidationError(f"That is not a valid {key_type} public key.") from None
    canonical = key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode().split()
    if canonical[0] != key_type or base64.b64decode(canonical[1]) != blob:
        # The blob names another type than the line, or carries trailing bytes.
        raise ValidationError(f"That is not a valid {key_type} public key.")
    if key_type == "ssh-rsa" and key.key_size < MIN_RSA_BITS:  # type: ignore[union-attr]
        raise ValidationError(f"RSA keys need at least {MIN_RSA_BITS} bits.")
    return PublicKey(key_type=key_type, blob=blob, comment=comment)


def node_payload(lines: Iterable[str]) -> str:
    """Keys for RUNCRATE_SSH_KEYS: each canonical line re-parsed, base64-encoded, space-separated.

    Re-parsing here means a row written before keys were parsed for real (or by hand)
    never reaches a node unless it is one plain key: such a row is left out and logged.
    """
    encoded = []
    for line in lines:
        try:
            key = parse_public_key(line)
        except ValidationError as exc:
            logger.warning("SSH key left off the nodes: %s", " ".join(exc.messages))
            continue
        encoded.append(base64.b64encode(key.line.encode()).decode())
    return " ".join(encoded)
