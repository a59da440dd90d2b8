"""Replay: Reverb tables of T+1-step windows, the observers that fill them, the
learner's handle on a local or remote server, and policy-variable sync.

  tables     the experience and variables tables, a server with checkpoints, the sampler
  observers  whole episodes -> windows (Python and TF-driver observers)
  variables  table signatures, the server-fits-agent check, publishing/pulling variables
  handles    LocalReplay / RemoteReplay: the one interface the learner uses
"""
