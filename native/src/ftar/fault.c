/* PYMCOLL_FTAR_FAULT: a fault injected at a named point, for tests only.
 *   POINT:ACTION[:MS][@STEP]
 *   POINT   reduce_scatter | allgather | vote (after the operation, before the
 *           vote) | commit (after COMMIT, before the update is applied)
 *           | serve_state (a donor, halfway through sending its state)
 *   ACTION  kill (SIGKILL itself) | stall (sleep MS, default 2000, heartbeats go on)
 *           | stop (SIGSTOP itself: heartbeats stop too) | cut (close every socket)
 *   @STEP   only at that step (default: the first time the point is reached)
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "member.h"

static const char *const point_names[] = {"", "reduce_scatter", "allgather", "vote", "commit", "serve_state"};
static const char *const action_names[] = {"", "kill", "stall", "cut", "stop"};

static int lookup(const char *const *names, int count, const char *s, size_t len)
{
    for (int i = 1; i < count; ++i)
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0) return i;
    return 0;
}

int pmc_fault_parse(const char *spec, pmc_fault *f, char *msg, size_t msgcap)
{
    memset(f, 0, sizeof(*f));
    f->at_step = -1;
    if (spec == NULL || spec[0] == '\0') return 0;
    const char *colon = strchr(spec, ':');
    const char *end = spec + strcspn(spec, "@");
    if (colon == NULL || colon > end) goto bad;
    f->point = lookup(point_names, PMC_FAULT_POINT_COUNT, spec, (size_t)(colon - spec));
    const char *act = colon + 1;
    const char *act_end = act + strcspn(act, ":@");
    f->action = lookup(action_names, PMC_FAULT_ACTION_COUNT, act, (size_t)(act_end - act));
    if (f->point == 0 || f->action == 0) goto bad;
    f->ms = 2000;
    if (*act_end == ':') {
        char *e = NULL;
        const unsigned long ms = strtoul(act_end + 1, &e, 10);
        if (e == act_end + 1 || (*e != '\0' && *e != '@') || ms > 3600000UL) goto bad;
        f->ms = (uint32_t)ms;
    }
    if (*end == '@') {
        char *e = NULL;
        const long long s = strtoll(end + 1, &e, 10);
        if (e == end + 1 || *e != '\0' || s < 0) goto bad;
        f->at_step = s;
    }
    return 0;
bad:
    if (msg != NULL)
        snprintf(msg, msgcap,
                 "PYMCOLL_FTAR_FAULT='%s' is not POINT:ACTION[:MS][@STEP] with POINT one of reduce_scatter, "
                 "allgather, vote, commit, serve_state and ACTION one of kill, stall, stop, cut",
                 spec);
    return -1;
}

void pmc_member_fault(pmc_ftar_member *m, int point, int64_t step)
{
    pmc_fault *f = &m->fault;
    if (f->fired || f->point != point || (f->at_step >= 0 && f->at_step != step)) return;
    f->fired = 1;
    pmc_member_log(m, "fault injected: %s:%s at step %" PRId64, point_names[point], action_names[f->action], step);
    switch (f->action) {
    case PMC_FAULT_KILL: raise(SIGKILL); break;
    case PMC_FAULT_STOP: raise(SIGSTOP); break;
    case PMC_FAULT_STALL: {
        struct timespec ts = {.tv_sec = f->ms / 1000, .tv_nsec = (long)(f->ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
        break;
    }
    case PMC_FAULT_CUT:
        /* A cut link: peers and coordinator see the connections close. */
        for (uint32_t s = 0; s < m->streams; ++s) {
            if (m->send[s].fd >= 0) shutdown(m->send[s].fd, SHUT_RDWR);
            if (m->recv[s].fd >= 0) shutdown(m->recv[s].fd, SHUT_RDWR);
        }
        pthread_mutex_lock(&m->send_lock);
        if (m->ctrl.fd >= 0) shutdown(m->ctrl.fd, SHUT_RDWR);
        pthread_mutex_unlock(&m->send_lock);
        break;
    default: break;
    }
}
