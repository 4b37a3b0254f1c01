"""Any spec as an OpenEnv environment (`episodes serve-openenv SPEC`, docs/integrations/openenv.md).

OpenEnv (`openenv-core`, the `episodes[openenv]` extra) is the environment interface
TRL, torchforge, SkyRL and Unsloth speak. `env` maps its reset/step/state onto durable
interactive sessions (one Temporal workflow each, the trainer the policy); `server`
serves OpenEnv's own app over it and ends or parks a session as its connection ends;
`client` is the typed OpenEnv client for it.
"""
