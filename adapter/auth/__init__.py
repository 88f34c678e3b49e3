"""Authentication and authorization of an aggregated API server: requestheader client certificates, client
certificates, TokenReview for bearer tokens, SubjectAccessReview for authorization, and the serving TLS that asks for
client certificates."""
