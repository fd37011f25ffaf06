"""The API's routes, one router per resource: jobs, gpus, admin, system."""
