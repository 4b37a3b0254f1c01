"""Cloud runtimes: a box is a sandbox or VM of a platform (Modal, Prime Intellect, E2B),
reached through its SDK; boxes that may outlive their worker are kept in a ledger.

    modal         ModalRuntime
    prime         PrimeRuntime
    e2b           E2BRuntime
    remote_box    RemoteBox: what they share (start, stop, control commands, retries,
                  how a box ended: lost, past its memory, or there)
    remote_shell  RemoteShellProcess: one process, run through a wrapper shell
    ledger        the boxes a worker made, so that a later one destroys its leftovers
"""
