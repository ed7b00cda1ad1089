"""The activation pages a user walks through: enter the code, confirm the device, consent.

State travels in hidden form fields (user_code and step); no cookies.
"""

from html import escape

from cmsemu.request import Request
from cmsemu.responses import Response, html_page
from cmsemu.state import State

ACTION = "/idp/activate"


def _form(step: str, user_code: str, buttons: list[tuple[str, str]], code_field: bool) -> str:
    code = escape(user_code, quote=True)
    field = (
        f'<label>Code <input type="text" name="user_code" value="{code}" autocomplete="off">'
        "</label>"
        if code_field
        else f'<input type="hidden" name="user_code" value="{code}">'
    )
    buttons_html = "".join(
        f'<button type="submit" name="action" value="{value}">{label}</button>'
        for value, label in buttons
    )
    return (
        f'<form method="post" action="{ACTION}">'
        f'<input type="hidden" name="step" value="{escape(step, quote=True)}">'
        f"{field}{buttons_html}</form>"
    )


def _code_entry(user_code: str) -> Response:
    inner = "<p>Enter the code displayed on your device.</p>" + _form(
        "code", user_code, [("continue", "Continue")], code_field=True
    )
    return html_page(200, "Device Activation", inner)


def _confirmation(user_code: str) -> Response:
    inner = (
        "<p>Please confirm that this is the code displayed on your device: "
        f"<strong>{escape(user_code)}</strong></p>"
        + _form("confirm", user_code, [("confirm", "Confirm"), ("cancel", "Cancel")], False)
    )
    return html_page(200, "Device Confirmation", inner)


def _welcome(user_code: str) -> Response:
    inner = (
        "<p>The Cluster Management Service CLI is requesting access to your account.</p>"
        + _form("welcome", user_code, [("confirm", "Confirm"), ("cancel", "Cancel")], False)
    )
    return html_page(200, "Welcome", inner)


def _invalid(user_code: str) -> Response:
    inner = (
        f"<p>The code <strong>{escape(user_code)}</strong> is invalid, expired or already "
        f"used.</p>{_form('code', '', [('continue', 'Continue')], code_field=True)}"
    )
    return html_page(400, "Invalid Code", inner)


def handle(state: State, request: Request) -> Response:
    """GET shows the code entry form; POST moves one step through the flow."""
    if request.method == "GET":
        return _code_entry(request.query_params().get("user_code", ""))
    form = request.form()
    user_code, step, action = (form.get(k, "") for k in ("user_code", "step", "action"))
    code = state.devices.awaiting(user_code, state.now())
    if code is None:
        return _invalid(user_code)
    if action == "cancel":
        code.status = "denied"
        return html_page(
            200, "Access Denied", "<p>You cancelled: the device was not authorized.</p>"
        )
    if (step, action) == ("code", "continue"):
        return _confirmation(code.user_code)
    if (step, action) == ("confirm", "confirm"):
        return _welcome(code.user_code)
    if (step, action) == ("welcome", "confirm"):
        code.status = "approved"
        return html_page(
            200,
            "Congratulations, you're all set!",
            "<p>Your device is now connected. You can close this window.</p>",
        )
    return html_page(400, "Bad Request", "<p>Unexpected form submission.</p>")
