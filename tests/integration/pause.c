/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pod sandbox process of the test image: it holds the pod's namespaces, reaps orphans (it runs
 * as pid 1 of the pod) and exits 0 on SIGINT or SIGTERM.  Built with `gcc -static` by
 * scripts/containerd-sandbox.sh, so it depends on nothing in the image.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

static void
noop(int sig)
{
}

int
main(void)
{
    struct sigaction sa = {.sa_handler = noop};
    sigset_t set;

    /* pid 1 never gets a signal whose disposition is the default: install real handlers, then
     * block the signals and take them synchronously. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    sigprocmask(SIG_BLOCK, &set, NULL);

    for (;;) {
        int sig = sigwaitinfo(&set, NULL);

        if (sig < 0) {
            if (errno == EINTR)
                continue;
            perror("pause: sigwaitinfo");
            return 1;
        }
        if (sig == SIGCHLD) {
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
            continue;
        }
        return 0;
    }
}
