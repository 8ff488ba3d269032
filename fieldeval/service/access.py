"""Who may use the service: the token (a bearer header, or the dashboard's cookie), and the few public routes.

Every route is closed unless :data:`PUBLIC_PATHS` lists it: what a new route
reads or writes needs the token without anyone remembering to ask for it.
``GET /?token=...`` (the URL ``fieldeval serve`` prints) sets an HttpOnly,
SameSite=Strict cookie and redirects to the page without the token; the
dashboard's own calls then carry the cookie.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

DOCS_ASSETS = "/assets/docs"  # where /docs and /redoc load their scripts and styles from (fastapi-offline's copies)
PUBLIC_PATHS = frozenset({"/api/benchmarks", "/assets/plotly.min.js", "/openapi.json", "/docs",
                          "/docs/oauth2-redirect", "/redoc",
                          *(f"{DOCS_ASSETS}/{name}" for name in ("swagger-ui-bundle.js", "swagger-ui.css",
                                                                 "redoc.standalone.js", "favicon.png"))
                          })  # read-only, no run, model or endpoint in them
READ_METHODS = ("GET", "HEAD")
DENIED = ("missing or wrong token; send 'Authorization: Bearer <token>' (fieldeval serve prints it and the file "
          "it keeps it in) or open the dashboard URL it printed")
LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fieldeval: token needed</title></head>
<body><h1>fieldeval</h1>
<p>This service needs its token. Open the URL that <code>fieldeval serve</code> printed when it started
(<code>http://HOST:PORT/?token=...</code>), or add <code>?token=</code> and the token from the file it named.</p>
</body></html>
"""

CallNext = Callable[[Request], Awaitable[Response]]


def cookie_name(request: Request) -> str:
    """The token cookie's name, one per port: cookies do not tell ports apart, two services must not share one."""
    port = request.url.port or {"https": 443}.get(request.url.scheme, 80)
    return f"fieldeval_token_{port}"


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def credential(request: Request, token: str) -> str | None:
    """``"bearer"`` or ``"cookie"``: how the request proved it holds the token; None when it did not."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and _matches(value.strip(), token):
        return "bearer"
    if _matches(request.cookies.get(cookie_name(request)), token):
        return "cookie"
    return None


def same_origin(request: Request) -> bool:
    """Whether a browser's ``Origin`` (when it sent one) is this service's own host and port."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


def _denied(request: Request) -> Response:
    if request.url.path == "/":
        return HTMLResponse(LOGIN_PAGE, status_code=401)
    return JSONResponse({"message": DENIED}, status_code=401, headers={"WWW-Authenticate": "Bearer"})


async def gate(request: Request, call_next: CallNext, token: str | None) -> Response:
    """Answer ``request`` when it holds ``token`` or asks for a public route; 401 otherwise (None: all open)."""
    if token is None or (request.url.path in PUBLIC_PATHS and request.method in READ_METHODS):
        return await call_next(request)
    if request.url.path == "/" and request.method in READ_METHODS and "token" in request.query_params:
        if not _matches(request.query_params["token"], token):
            return _denied(request)
        rest = request.url.remove_query_params("token").query
        answer = RedirectResponse("/" + (f"?{rest}" if rest else ""), status_code=303)
        answer.set_cookie(cookie_name(request), token, httponly=True, samesite="strict", path="/")
        return answer
    how = credential(request, token)
    if how is None:
        return _denied(request)
    if how == "cookie" and request.method not in READ_METHODS and not same_origin(request):
        return JSONResponse({"message": f"Origin {request.headers.get('origin')!r}: not this service; "
                                        "write from its own dashboard or send the bearer token"}, status_code=403)
    return await call_next(request)
