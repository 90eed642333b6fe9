"""The clusters app's names for the one refusal family (config.errors)."""

from __future__ import annotations

from config.errors import Conflict, DomainError, PaymentRequired

ClusterError = DomainError
InsufficientCredits = PaymentRequired

__all__ = ["ClusterError", "Conflict", "InsufficientCredits"]
