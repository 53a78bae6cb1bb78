"""What a web request would call. Each service is one transaction (O1).

A service takes an `AsyncSession`. If the session has no transaction open, the service
opens one and commits it; if the caller already began one, the service joins it and the
caller decides (a unit of work spanning several calls). Either way a raised error leaves
nothing written.
"""
