/* rsc_gate: the gate through which members and producers call the data plane's Redis Functions library
 * (docs/redis-acl.md, "The gate module"; built and located by rsc_redis/module/__init__.py).
 *
 *   RSC.FCALL_MEMBER   <function> <numkeys> key... arg...   FCALL of a member's function
 *   RSC.FCALL_PRODUCER <function> <numkeys> key... arg...   FCALL of a producer's function
 *   RSC.FCALL_RO       <function> <numkeys> key... arg...   FCALL_RO of the version function
 *
 * Why. Redis checks every command a function runs against the ACL of the user who called FCALL, so a
 * user allowed to run our functions must also hold the raw commands they use (XADD, XCLAIM, HSET, ...)
 * and can send them directly, around every check the functions make. The gate runs FCALL through
 * RedisModule_Call *without* the "C" flag, as Redis's unrestricted internal client: the function's inner
 * commands are not checked against the caller's command rules, so a gated user holds the gate's
 * commands and none of the commands behind them.
 *
 * What still holds for the caller:
 *   - its command rules: a member's user holds +rsc.fcall_member, a producer's +rsc.fcall_producer, both
 *     +rsc.fcall_ro; one command per role, so a member cannot append events through the producer's
 *     function, nor a producer act as a member;
 *   - its key patterns: every command declares its keys exactly as FCALL does (key spec: the argument at
 *     index 2 is the number of keys, which follow it), so Redis checks them against the caller's
 *     ~patterns before the command runs (read-write, or read for RSC.FCALL_RO). A Redis Cluster (7.0)
 *     routes a module command by its getkeys callback instead (report_keys: the same keys), so a call
 *     on a node that does not serve its slot is answered MOVED / ASK before it runs. Our functions touch only the keys they are given (and
 *     check them: rsc_redis/dataplane/fence.lua), so a user's key scope bounds what the gate changes;
 *   - only this project's functions: rsc_<12 lower-case hex digits>_<operation>, <operation> one of the
 *     command's list below (rsc_redis/dataplane/library.py's FUNCTIONS and version function, split by
 *     role as rsc_redis/module/__init__.py does; tests/test_redis_gate.py keeps the lists equal).
 *     Anything else is refused before anything runs.
 *
 * RedisModule_Call flags: "!" replicates what the function writes to replicas and the AOF (without it
 * the writes stay on the primary alone), "0" answers in the caller's protocol (RESP2 or RESP3), "E"
 * turns a refusal before the function runs (arity, a function not found) into the error reply the
 * caller sees, and "v" passes the caller's arguments on unchanged. Not "C" (the point above), nor "S"
 * (FCALL is itself flagged noscript, so script mode would refuse it).
 *
 * Command flags: the two write gates are "write" (refused on a read-only replica, as a write function
 * would be) and RSC.FCALL_RO "readonly"; all "deny-script": a function cannot call the gate.
 */

#include <string.h>

#include "redismodule.h"

#define LIBRARY_PREFIX "rsc_"
#define DIGEST_CHARS 12

/* The operations each command calls (rsc_redis/module/__init__.py: MEMBER, PRODUCER, READ_ONLY). */
static const char *const MEMBER[] = {
    "fetch", "read_new", "read_pending", "claim", "ack", "delete_ghosts", "dead_letter", "renew_lease", NULL,
};
static const char *const PRODUCER[] = {"produce", "idempotent_produce", NULL};
static const char *const READ_ONLY[] = {"version", NULL};

/* 1 if `name` is rsc_<12 lower-case hex>_<one of operations>, else 0. */
static int is_library_function(const char *name, size_t len, const char *const *operations) {
    size_t head = strlen(LIBRARY_PREFIX) + DIGEST_CHARS + 1;
    if (len <= head || strncmp(name, LIBRARY_PREFIX, strlen(LIBRARY_PREFIX)) != 0) return 0;
    for (size_t i = strlen(LIBRARY_PREFIX); i < head - 1; i++) {
        char c = name[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
    }
    if (name[head - 1] != '_') return 0;
    for (const char *const *op = operations; *op; op++) {
        if (len - head == strlen(*op) && memcmp(name + head, *op, len - head) == 0) return 1;
    }
    return 0;
}

/* The keys of a call, for Redis Cluster's routing: it finds a module command's keys through this
 * callback ("getkeys-api"), not through the key spec, which the ACL check uses. Both name the same
 * arguments. A malformed number of keys names none; FCALL then refuses the call. */
static int report_keys(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int flags) {
    long long numkeys;
    if (argc >= 3 && RedisModule_StringToLongLong(argv[2], &numkeys) == REDISMODULE_OK && numkeys >= 0 &&
        numkeys <= argc - 3) {
        for (int i = 0; i < numkeys; i++) RedisModule_KeyAtPosWithFlags(ctx, 3 + i, flags);
    }
    return REDISMODULE_OK;
}

static int gate(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, const char *command,
                const char *const *operations, const char *refusal) {
    int read_only = strcmp(command, "FCALL_RO") == 0;
    if (RedisModule_IsKeysPositionRequest(ctx)) {
        int flags = read_only ? REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS
                              : REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE;
        return report_keys(ctx, argv, argc, flags);
    }
    if (argc < 3) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[1], &len);
    if (!is_library_function(name, len, operations)) return RedisModule_ReplyWithError(ctx, refusal);
    RedisModuleCallReply *reply = RedisModule_Call(ctx, command, "!0Ev", argv + 1, (size_t)(argc - 1));
    if (reply == NULL) return RedisModule_ReplyWithError(ctx, "ERR the gate could not call the function");
    RedisModule_ReplyWithCallReply(ctx, reply);
    RedisModule_FreeCallReply(reply);
    return REDISMODULE_OK;
}

static int fcall_member(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return gate(ctx, argv, argc, "FCALL", MEMBER,
                "ERR RSC.FCALL_MEMBER calls only a member's functions of the data plane's library "
                "(rsc_<digest>_<operation>, rsc_redis/module/__init__.py)");
}

static int fcall_producer(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return gate(ctx, argv, argc, "FCALL", PRODUCER,
                "ERR RSC.FCALL_PRODUCER calls only a producer's functions of the data plane's library "
                "(rsc_<digest>_<operation>, rsc_redis/module/__init__.py)");
}

static int fcall_ro(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return gate(ctx, argv, argc, "FCALL_RO", READ_ONLY,
                "ERR RSC.FCALL_RO calls only the version function of the data plane's library "
                "(rsc_<digest>_version, rsc_redis/module/__init__.py)");
}

/* Create `name` with FCALL's key spec: argv[2] is the number of keys, which follow it. */
static int create(RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc handler, const char *flags,
                  uint64_t key_flags) {
    if (RedisModule_CreateCommand(ctx, name, handler, flags, 0, 0, 0) == REDISMODULE_ERR) {
        return REDISMODULE_ERR;
    }
    RedisModuleCommand *command = RedisModule_GetCommand(ctx, name);
    if (command == NULL) return REDISMODULE_ERR;
    RedisModuleCommandKeySpec key_specs[] = {
        {.flags = key_flags,
         .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
         .bs.index.pos = 2,
         .find_keys_type = REDISMODULE_KSPEC_FK_KEYNUM,
         .fk.keynum = {.keynumidx = 0, .firstkey = 1, .keystep = 1}},
        {0},
    };
    RedisModuleCommandInfo info = {
        .version = REDISMODULE_COMMAND_INFO_VERSION,
        .summary = "Calls a function of the data plane's library as the gate (rsc_redis/module/rsc_gate.c)",
        .arity = -3,
        .key_specs = key_specs,
    };
    return RedisModule_SetCommandInfo(command, &info);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "rsc_gate", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR) return REDISMODULE_ERR;
    const uint64_t rw = REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_UPDATE;
    if (create(ctx, "rsc.fcall_member", fcall_member, "write deny-script getkeys-api", rw) == REDISMODULE_ERR) {
        return REDISMODULE_ERR;
    }
    if (create(ctx, "rsc.fcall_producer", fcall_producer, "write deny-script getkeys-api", rw) == REDISMODULE_ERR) {
        return REDISMODULE_ERR;
    }
    if (create(ctx, "rsc.fcall_ro", fcall_ro, "readonly deny-script getkeys-api",
               REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS) == REDISMODULE_ERR) {
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
