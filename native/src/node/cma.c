/* Probe for cross-memory attach (process_vm_readv). */
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pymcoll.h"

int pmc_cma_probe(void)
{
    /* The child reads from its parent: Yama's ptrace_scope=1 forbids that
     * direction exactly as it forbids one MPI rank reading a sibling. */
    static const char pattern[16] = "pymcoll-cma-ok!";
    volatile char source[16];
    memcpy((char *)source, pattern, sizeof(pattern));
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        char got[16] = {0};
        struct iovec local = {got, sizeof(got)};
        struct iovec remote = {(void *)source, sizeof(got)};
        ssize_t n = process_vm_readv(parent, &local, 1, &remote, 1, 0);
        _exit(n == (ssize_t)sizeof(got) && memcmp(got, pattern, sizeof(got)) == 0 ? 0 : 1);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child) return -1;
    if (!WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) == 0 ? 1 : 0;
}
