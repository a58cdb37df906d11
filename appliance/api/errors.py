"""API errors. Every one becomes `{"type", "code", "message"}` with its status."""


class ApiError(Exception):
    status = 500
    type = "InternalError"

    def __init__(self, message, status=None, type=None, headers=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.headers = headers or {}

    def body(self):
        return {"type": self.type, "code": self.status, "message": self.message}


class BadRequest(ApiError):
    status, type = 400, "ValidationError"


class Unauthorized(ApiError):
    status, type = 401, "Unauthorized"

    def __init__(self, message="authentication required"):
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer realm="appliance"'})


class Forbidden(ApiError):
    status, type = 403, "Forbidden"


class NotFound(ApiError):
    status, type = 404, "NotFound"


class MethodNotAllowed(ApiError):
    status, type = 405, "MethodNotAllowed"


class Conflict(ApiError):
    status, type = 409, "Conflict"


class PayloadTooLarge(ApiError):
    status, type = 413, "PayloadTooLarge"


class UnsupportedMediaType(ApiError):
    status, type = 415, "UnsupportedMediaType"


ERROR_TYPES = {cls.status: cls.type for cls in (
    BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict,
    PayloadTooLarge, UnsupportedMediaType)}
ERROR_TYPES[500] = "InternalError"
ERROR_TYPES[503] = "ServiceUnavailable"
