"""Cloud runtimes: a box is a sandbox or VM of a platform (Modal, Prime Intellect),
reached through its SDK; boxes that may outlive their worker are kept in a ledger.

    modal         ModalRuntime
    prime         PrimeRuntime
    remote_box    RemoteBox: what both share (start, stop, control commands, retries)
    remote_shell  RemoteShellProcess: one process, run through a wrapper shell
    ledger        the boxes a worker made, so that a later one destroys its leftovers
"""
