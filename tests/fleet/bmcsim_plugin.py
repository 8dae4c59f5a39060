"""A bmcsim plugin for tests: a Drive.SecureErase action that starts a task and wipes the drive when it ends."""

from world.bmc import Plugin, RedfishError


class ErasePlugin(Plugin):
    name = "erase-test"

    def on_bmc_created(self, sim, bmc):
        bmc.extra[self.name] = {"wiped": False, "resets": 0}

    def route(self, sim, bmc, method, parts, body, raw):
        if parts == ("Systems", "1", "Storage", "1", "Drives", "0"):
            return 200, {"Id": "0", "Wiped": bmc.extra[self.name]["wiped"]}, {}
        if method == "POST" and parts[-1:] == ("Drive.SecureErase",):
            if body.get("Mode", "Sanitize") != "Sanitize":
                raise RedfishError(400, "Base.1.13.0.ActionParameterValueNotInList", body["Mode"], "Mode", "erase")
            state = bmc.extra[self.name]
            task = sim.new_task(bmc, name="erase", seconds=0, on_done=lambda: state.update(wiped=True))
            return 202, {"@odata.id": f"/redfish/v1/TaskService/Tasks/{task.id}"}, {
                "Location": f"/redfish/v1/TaskService/Tasks/{task.id}"}
        return None

    def snapshot(self, sim, bmc):
        return {"erase": dict(bmc.extra[self.name])}

    def on_reset(self, sim, bmc, kind):
        bmc.extra[self.name]["resets"] += 1


PLUGIN = ErasePlugin()
