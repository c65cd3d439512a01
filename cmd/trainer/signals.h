// The signals that stop a training run: each asks for a checkpoint at the next step boundary.
#pragma once

namespace trainer::cli {

// INT (Ctrl-C), TERM (kill, schedulers), HUP (a closed terminal or SSH session), USR1 (Slurm's
// `--signal` warning before a time limit) and PIPE (the console's reader is gone, `| head`): the
// first asks the run to stop with a checkpoint and exit 130; a second INT, TERM, HUP or USR1 (Ctrl-C
// pressed twice) lets that checkpoint finish and says so on stderr; a third leaves at once (exit
// 130; the checkpoint being written is a temporary file, the previous one stays valid). Before the step loop starts (reading data, building the model) there is nothing
// to checkpoint: a stop signal ends the process at once, with one line. After PIPE the dead stream is pointed at /dev/null, so later console lines
// cost nothing and nothing else dies of it.
void install_stop_signals();

}  // namespace trainer::cli
