/* Trace settings, the public dump entry, and the signal handlers: SIGUSR1
 * asks for a dump (a peer that timed out waiting for this rank sends it);
 * a fatal signal dumps, then goes on to the handler that was there before. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace.h"

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
    }
}

/* Calls the handler that was installed before ours, as it would have run. */
static void chain(int sig, siginfo_t *info, void *uctx)
{
    const struct sigaction *old = &pmc_trace_ctx.previous[sig];
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction != NULL) old->sa_sigaction(sig, info, uctx);
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN && old->sa_handler != NULL) {
        old->sa_handler(sig);
    }
}

static void on_sigusr1(int sig, siginfo_t *info, void *uctx)
{
    const int saved = errno;
    /* Several peers may time out on this rank at once: one dump for them. */
    const uint64_t now = pmc_trace_now(), last = atomic_load(&pmc_trace_ctx.last_signal_dump_ns);
    if (last == 0 || now - last > UINT64_C(200000000)) {
        atomic_store(&pmc_trace_ctx.last_signal_dump_ns, now);
        (void)pmc_trace_dump_now("SIGUSR1", 1);
    }
    chain(sig, info, uctx);
    errno = saved;
}

static void on_fatal(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    (void)pmc_trace_dump_now(signal_name(sig), 1);
    /* The previous disposition takes the signal again on return (a fault
     * repeats; raise covers a signal sent with kill). */
    sigaction(sig, &pmc_trace_ctx.previous[sig], NULL);
    raise(sig);
}

void pmc_trace_install_handlers(void)
{
    if (!pmc_trace_ctx.signals || atomic_exchange(&pmc_trace_ctx.handlers_installed, 1)) return;
    /* A fault from a stack overflow needs a stack of its own to dump from. */
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
        stack_t alt = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0};
        if (alt.ss_sp != NULL && sigaltstack(&alt, NULL) != 0) free(alt.ss_sp);
        else pmc_trace_ctx.alt_stack = alt.ss_sp;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sa.sa_sigaction = on_sigusr1;
    sigaction(SIGUSR1, &sa, &pmc_trace_ctx.previous[SIGUSR1]);
    sa.sa_sigaction = on_fatal;
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(*fatal_signals); ++i) {
        struct sigaction old;
        if (sigaction(fatal_signals[i], NULL, &old) != 0) continue;
        /* An ignored signal stays ignored. */
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
        sigaction(fatal_signals[i], &sa, &pmc_trace_ctx.previous[fatal_signals[i]]);
    }
}

int pmc_trace_setup(const pmc_trace_config *cfg)
{
    if (cfg == NULL) return PMC_ERR_ARG;
    const char *dir = cfg->dir != NULL ? cfg->dir : "";
    if (strlen(dir) >= PMC_TRACE_DIR_MAX - 64) return PMC_ERR_ARG;
    if (dir[0] != '\0') {
        /* Every rank may create it; the others find it there. */
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) return PMC_ERR_SYS;
        if (access(dir, W_OK | X_OK) != 0) return PMC_ERR_SYS;
    }
    while (atomic_load(&pmc_trace_ctx.dumping)) sched_yield();
    strcpy(pmc_trace_ctx.dir, dir);
    pmc_trace_ctx.ring_records = cfg->ring_records;
    pmc_trace_ctx.signals = cfg->signals != 0;
    /* The Python extension loaded into a program that also runs under the
     * preload library: two copies of the core, two dump files per rank. */
#ifndef PMC_CALL_PMPI
    const char *preload = getenv("LD_PRELOAD");
    if (preload != NULL && strstr(preload, "pymcoll_pmpi") != NULL) strcpy(pmc_trace_ctx.name_tag, ".python");
#endif
    return PMC_OK;
}

int pmc_trace_dump(const char *reason)
{
    if (pmc_trace_ctx.dir[0] == '\0') return PMC_ERR_ARG;
    return pmc_trace_dump_now(reason != NULL && reason[0] != '\0' ? reason : "request", 0) == 0 ? PMC_OK
                                                                                                : PMC_ERR_SYS;
}

const char *pmc_trace_dir(void) { return pmc_trace_ctx.dir; }
