/*
 * remote_group.c: a group across hosts (hal_remote_group_*) of four
 * processes at one address of the loopback, over UCX. The program forks
 * before any hal call: three members and an intruder. Each member joins
 * the group at 127.0.0.1:PORT with the secret, checks its rank and the
 * members' addresses, exports CPU shared memory filled with its rank from
 * the group's node, swaps the handle texts in one all-gather, reads the
 * next rank's memory through them, receives a broadcast from rank 2, and
 * meets the others at a barrier; a child it forks after joining is
 * refused the group's rounds (HAL_ERR_FORKED) and its release leaves the
 * parent's membership whole. While the group waits for its last
 * member (the parent, which joins once the intruder is done), the
 * intruder sees the group's address listened on (in /proc/net/tcp: it
 * never binds the address, which would make it the group's server), joins
 * with another secret and is refused with HAL_ERR_PERMISSION_DENIED; a
 * join without any secret is HAL_ERR_INVALID_ARGUMENT.
 *
 *   remote_group PORT
 *
 * Each member prints "member R: N checks passed, 0 failed"; the parent
 * adds its children's exit statuses to its own checks and prints
 * "N checks passed, 0 failed" last, exiting 0, or names each failure;
 * it prints "UCX unavailable: ..." and exits 2 where UCX cannot be loaded.
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checks.h"

#define MEMBERS 4
#define NAME "c-members"
#define SECRET "00112233445566778899aabbccddeeff"
#define OTHER_SECRET "00112233445566778899aabbccddeef0"
#define TIMEOUT_NS 30000000000LL
#define PAYLOAD 4096
#define SIZE 8192

static char addr[64];
static unsigned port;

/* What a member holds until it leaves. */
struct member {
    hal_remote_group *group;
    hal_remote_node *node;
    hal_device *dev;
    hal_memory *mem;
    hal_remote_exported *exp;
    uint32_t rank;
};

/* A member: join, swap exports, read the next rank's, broadcast. 0 once
 * joined, 1 when the join failed, 2 without UCX. */
static int work(struct member *m) {
    hal_remote_group_options opts = {sizeof opts, 0, SECRET, TIMEOUT_NS, "127.0.0.1"};
    hal_remote_group *group = NULL;
    hal_status joined = hal_remote_group_join_at(addr, NAME, MEMBERS, &opts, &group);
    if (joined == HAL_ERR_UNAVAILABLE) {
        printf("UCX unavailable: %s\n", hal_last_error());
        return 2;
    }
    EXPECT(joined, HAL_OK);
    if (joined != HAL_OK)
        return 1;
    uint32_t rank = 99, size = 0;
    EXPECT(hal_remote_group_rank(group, &rank, &size), HAL_OK);
    CHECK(size == MEMBERS && rank < MEMBERS);

    /* A forked child's rounds on the membership answer HAL_ERR_FORKED, and
     * its release sends nothing: the group goes on below. */
    fflush(stdout);
    pid_t forked = fork();
    if (forked == 0) {
        int ok = hal_remote_group_barrier(group) == HAL_ERR_FORKED &&
                 strstr(hal_last_error(), "fork") != NULL &&
                 hal_remote_group_release(group) == HAL_OK;
        _exit(ok ? 0 : 1);
    }
    int forked_status = 0;
    CHECK(forked > 0 && waitpid(forked, &forked_status, 0) == forked &&
          WIFEXITED(forked_status) && WEXITSTATUS(forked_status) == 0);

    /* This member's own entry: its pid and its node's address. */
    hal_remote_node *node = NULL;
    EXPECT(hal_remote_group_node(group, &node), HAL_OK);
    char *mine = NULL, *listed = NULL;
    uint32_t pid = 0;
    EXPECT(hal_remote_node_address(node, &mine), HAL_OK);
    EXPECT(hal_remote_group_member(group, rank, &pid, &listed), HAL_OK);
    CHECK(pid == (uint32_t)getpid());
    CHECK(mine && listed && strcmp(mine, listed) == 0 && strncmp(mine, "127.0.0.1:", 10) == 0);
    hal_string_free(mine);
    hal_string_free(listed);
    EXPECT(hal_remote_group_member(group, MEMBERS, &pid, NULL), HAL_ERR_INVALID_ARGUMENT);

    /* Export memory filled with this rank from the group's node, and swap
     * the handles. */
    hal_device *dev = NULL;
    hal_memory *mem = NULL;
    EXPECT(hal_device_open("cpu-shm", 0, &dev), HAL_OK);
    EXPECT(hal_alloc(dev, SIZE, HAL_LOCATION_HOST, &mem), HAL_OK);
    unsigned char *bytes = NULL;
    EXPECT(hal_memory_host_ptr(mem, (void **)&bytes), HAL_OK);
    if (bytes)
        memset(bytes, (int)('a' + rank), SIZE);
    hal_remote_exported *exp = NULL;
    EXPECT(hal_remote_export(node, mem, true, &exp), HAL_OK);
    char *text = NULL;
    EXPECT(hal_remote_export_text(exp, &text), HAL_OK);
    static char texts[MEMBERS][PAYLOAD];
    size_t lens[MEMBERS] = {0};
    EXPECT(hal_remote_group_all_gather(group, text, text ? strlen(text) : 0, texts, PAYLOAD, lens),
           HAL_OK);
    CHECK(text && lens[rank] == strlen(text) && memcmp(texts[rank], text, lens[rank]) == 0);
    hal_string_free(text);
    uint32_t next = (rank + 1) % MEMBERS;
    CHECK(lens[next] > 6 && lens[next] < PAYLOAD && memcmp(texts[next], "hal1r.", 6) == 0);
    texts[next][lens[next] < PAYLOAD ? lens[next] : PAYLOAD - 1] = '\0';
    hal_remote_memory *theirs = NULL;
    EXPECT(hal_remote_connect(node, texts[next], &theirs), HAL_OK);
    static unsigned char got[SIZE];
    EXPECT(hal_remote_read(theirs, 0, got, sizeof got), HAL_OK);
    int all_theirs = 1;
    for (size_t i = 0; i < sizeof got; i++)
        all_theirs &= got[i] == (unsigned char)('a' + next);
    CHECK(all_theirs);
    EXPECT(hal_remote_memory_release(theirs), HAL_OK);

    /* A broadcast from rank 2; a payload over `cap` is refused. */
    char said[64];
    size_t said_len = 0;
    const char *plan = "layer 3 is ready";
    EXPECT(hal_remote_group_broadcast(group, 2, rank == 2 ? plan : NULL,
                                      rank == 2 ? strlen(plan) : 0, said, sizeof said, &said_len),
           HAL_OK);
    CHECK(said_len == strlen(plan) && memcmp(said, plan, said_len) == 0);
    EXPECT(hal_remote_group_broadcast(group, MEMBERS, NULL, 0, said, sizeof said, &said_len),
           HAL_ERR_INVALID_ARGUMENT);

    struct member held = {group, node, dev, mem, exp, rank};
    *m = held;
    return 0;
}

/* Meet the others at a barrier (nobody's export goes before everyone read
 * it), and leave. */
static void leave(struct member *m) {
    EXPECT(hal_remote_group_barrier(m->group), HAL_OK);
    EXPECT(hal_remote_export_release(m->exp), HAL_OK);
    EXPECT(hal_memory_release(m->mem), HAL_OK);
    EXPECT(hal_device_release(m->dev), HAL_OK);
    /* The group's node runs on while the group holds it. */
    EXPECT(hal_remote_node_release(m->node), HAL_OK);
    EXPECT(hal_remote_group_barrier(m->group), HAL_OK);
    EXPECT(hal_remote_group_release(m->group), HAL_OK);
    EXPECT(hal_remote_group_release(m->group), HAL_ERR_DOUBLE_RELEASE);
    printf("member %u: %d checks passed, %d failed\n", m->rank, passed, failed);
}

/* Whether a socket listens on 127.0.0.1:port (/proc/net/tcp: address and
 * port in hex, state 0A). */
static int listened_on(void) {
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return 0;
    char line[512], want[32];
    snprintf(want, sizeof want, "0100007F:%04X", port);
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char local[64], remote[64], state[8];
        if (sscanf(line, " %*s %63s %63s %7s", local, remote, state) == 3)
            found = strcmp(local, want) == 0 && strcmp(state, "0A") == 0;
    }
    fclose(f);
    return found;
}

/* The intruder: waits until the group is served, then is refused. */
static int intruder(void) {
    /* At most 30 s: the members' join times out by then. */
    for (int i = 0; i < 3000 && !listened_on(); i++)
        usleep(10000);
    CHECK(listened_on());
    hal_remote_group *group = NULL;
    hal_remote_group_options wrong = {sizeof wrong, 0, OTHER_SECRET, TIMEOUT_NS, "127.0.0.1"};
    EXPECT(hal_remote_group_join_at(addr, NAME, MEMBERS, &wrong, &group), HAL_ERR_PERMISSION_DENIED);
    CHECK(strstr(hal_last_error(), "secret") != NULL);
    CHECK(group == NULL);
    /* No secret at all: what to set, before anything is sent. */
    unsetenv("HAL_GROUP_SECRET");
    EXPECT(hal_remote_group_join_at(addr, NAME, MEMBERS, NULL, &group), HAL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(hal_last_error(), "HAL_GROUP_SECRET") != NULL);
    hal_remote_group_options bad = {sizeof bad, 0, "not hex", 0, NULL};
    EXPECT(hal_remote_group_join_at(addr, NAME, MEMBERS, &bad, &group), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_remote_group_join_at("nowhere", NAME, MEMBERS, &wrong, &group),
           HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_remote_group_join_at(addr, NULL, MEMBERS, &wrong, &group), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_remote_group_barrier((hal_remote_group *)0x51), HAL_ERR_INVALID_OBJECT);
    printf("intruder: %d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: remote_group PORT\n");
        return 1;
    }
    port = (unsigned)atoi(argv[1]);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    fflush(stdout);
    /* No hal object is made before the forks: each process makes its own. */
    pid_t children[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) {
        children[i] = fork();
        if (children[i] == 0) {
            if (i == MEMBERS - 1) {
                int code = intruder();
                fflush(stdout);
                _exit(code);
            }
            struct member m;
            int code = work(&m);
            if (code == 0)
                leave(&m);
            fflush(stdout);
            _exit(code ? code : failed ? 1 : 0);
        }
    }
    /* The intruder first, while the group waits for this last member. */
    int status = 0;
    CHECK(waitpid(children[MEMBERS - 1], &status, 0) == children[MEMBERS - 1] &&
          WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct member m;
    int code = work(&m);
    if (code == 2) {
        for (int i = 0; i < MEMBERS - 1; i++)
            waitpid(children[i], NULL, 0);
        return 2;
    }
    if (code == 0)
        leave(&m);
    for (int i = 0; i < MEMBERS - 1; i++)
        CHECK(waitpid(children[i], &status, 0) == children[i] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
