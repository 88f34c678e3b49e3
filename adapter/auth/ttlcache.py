"""The bounded expiring caches of the TokenReview and SubjectAccessReview answers: toolkit/ttlcache.py (the exporter's
TokenReview check uses them too)."""

from toolkit.ttlcache import CoalescingCache, ExpiringCache

__all__ = ["CoalescingCache", "ExpiringCache"]
