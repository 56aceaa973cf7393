"""The coordinator's HTTP API v1 (docs/protocol.md section 13), mounted at ``/api/v1/``.

    views.py        thin DRF views: authenticate, validate, one store call, the store's JSON back
    lifecycle.py    thin views of the operator actions (redeliver, skip, release-drain, dead letters,
                    retention); every action goes through coordinator/operations.py (audited first)
    serializers.py  strict request bodies -> the core's commands
    auth.py         bearer tokens (which credential a token is: coordinator/credentials.py) and staff
                    sessions; member / admin roles; credential scopes enforced
    parsers.py      JSON bodies: size-bounded, UTF-8, strict
    errors.py       RFC 9457 problem details; the one table of error code -> HTTP status
    schemas.py      OpenAPI documentation of the responses and the security schemes (drf-spectacular)
"""
