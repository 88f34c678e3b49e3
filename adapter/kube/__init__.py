"""The adapter's Kubernetes side: the watch-backed pod cache, and authentication and authorization as an aggregated
API server (requestheader client certificates, TokenReview, SubjectAccessReview), plus serving TLS.

Every call of the (blocking) `kubernetes` client runs in a thread, never on the event loop.
"""
