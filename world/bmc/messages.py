"""Redfish messages (Base, Update and TaskEvent registries) and error bodies."""

_TEXT = {
    "Base.1.13.0.Success": ("OK", "The request completed successfully."),
    "Base.1.13.0.GeneralError": ("Critical", "A general error has occurred. See Resolution for information on how to resolve the error."),
    "Base.1.13.0.ResourceNotFound": ("Critical", "The requested resource of type %1 named '%2' was not found."),
    "Base.1.13.0.ActionNotSupported": ("Critical", "The action %1 is not supported by the resource."),
    "Base.1.13.0.ActionParameterMissing": ("Critical", "The action %1 requires the parameter %2 to be present in the request body."),
    "Base.1.13.0.ActionParameterValueNotInList": ("Warning", "The value '%1' for the parameter %2 in the action %3 is not in the list of acceptable values."),
    "Base.1.13.0.ActionParameterNotSupported": ("Warning", "The parameter %1 for the action %2 is not supported on the target resource."),
    "Base.1.13.0.MalformedJSON": ("Critical", "The request body submitted was malformed JSON and could not be parsed by the receiving service."),
    "Base.1.13.0.InsufficientPrivilege": ("Critical", "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation."),
    "Base.1.13.0.NoValidSession": ("Critical", "There is no valid session established with the implementation."),
    "Base.1.13.0.ServiceTemporarilyUnavailable": ("Critical", "The service is temporarily unavailable.  Retry in %1 seconds."),
    "Base.1.13.0.ResetRequired": ("Warning", "In order to apply changes, recover from errors, or complete the operation, a component reset is required with the Reset action URI '%1' and ResetType '%2'."),
    "Base.1.13.0.OperationNotAllowed": ("Critical", "The HTTP method is not allowed on this resource."),
    "Update.1.0.TargetDetermined": ("OK", "The target device '%1' will be updated with image '%2'."),
    "Update.1.0.TransferringToComponent": ("OK", "Image '%1' is being transferred to '%2'."),
    "Update.1.0.UpdateInProgress": ("OK", "An update is in progress."),
    "Update.1.0.UpdateSuccessful": ("OK", "Device '%1' successfully updated with image '%2'."),
    "Update.1.0.AwaitToActivate": ("OK", "Awaiting for an action to proceed with activating image '%1' on '%2'."),
    "Update.1.0.ApplyFailed": ("Critical", "Installation of image '%1' to '%2' failed."),
    "Update.1.0.ActivateFailed": ("Critical", "Activation of image '%1' on '%2' failed."),
    "Update.1.0.VerificationFailed": ("Critical", "Verification of image '%1' at '%2' failed."),
    "Update.1.0.TransferFailed": ("Critical", "Transfer of image '%1' to '%2' failed."),
    "Update.1.0.TargetsBusy": ("Warning", "The target device(s) '%1' cannot be updated at this time because they are busy."),
    "TaskEvent.1.0.TaskAborted": ("Critical", "The task with Id '%1' has been aborted."),
    "TaskEvent.1.0.TaskCancelled": ("Warning", "The task with Id '%1' has been cancelled."),
}


def message(message_id: str, *args: object) -> dict:
    severity, text = _TEXT.get(message_id, ("Critical", "%1 %2"))
    for n, arg in enumerate(args, start=1):
        text = text.replace(f"%{n}", str(arg))
    return {"@odata.type": "#Message.v1_1_1.Message", "MessageId": message_id, "Message": text,
            "MessageArgs": [str(a) for a in args], "MessageSeverity": severity, "Severity": severity,
            "Resolution": "None"}


def error_body(message_id: str, *args: object) -> dict:
    msg = message(message_id, *args)
    return {"error": {"code": message_id, "message": msg["Message"], "@Message.ExtendedInfo": [msg]}}


class RedfishError(Exception):
    """Raised by the state layer; the server answers ``status`` with a Redfish error body."""

    def __init__(self, status: int, message_id: str, *args: object) -> None:
        super().__init__(f"{status} {message_id} {args}")
        self.status = status
        self.body = error_body(message_id, *args)
