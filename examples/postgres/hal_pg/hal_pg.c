/*
 * hal_pg: one shared buffer for every backend of a PostgreSQL server, through
 * hal's C ABI (libhal_ipc, include/hal.h).
 *
 * A background worker, started by the postmaster when hal_pg is in
 * shared_preload_libraries, opens a device (hal_pg.backend: cuda-uvm's
 * managed memory where a GPU or the stand-in driver answers, CPU shared
 * memory otherwise), allocates hal_pg.size_mb MiB, exports it, and publishes
 * the handle's text in PostgreSQL shared memory with a generation number.
 * Each backend (and each parallel worker) imports the buffer on its first
 * call and keeps the import; a new generation (a restarted worker) is
 * imported afresh. The postmaster itself never calls hal: it only forks, so
 * no vendor runtime and no hal thread lives in it.
 *
 * SQL: hal_pg_write(offset, data), hal_pg_read(offset, len),
 * hal_pg_checksum(), hal_pg_info().
 */
#include "postgres.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "hal.h"

PG_MODULE_MAGIC;

/* The longest handle text the shared slot holds. */
#define HAL_PG_TEXT_MAX 4096
/* The longest backend name. */
#define HAL_PG_NAME_MAX 32
/* How often the worker refreshes the importer count, in milliseconds. */
#define HAL_PG_TICK_MS 100
/* hal_pg_checksum reads the buffer in pieces of this size. */
#define HAL_PG_CHUNK (1024 * 1024)

/* What the worker publishes, under the spinlock. */
typedef struct HalPgShared
{
	slock_t		mutex;
	/* 0 until a worker has published a buffer; changes with every buffer. */
	uint64		generation;
	/* The worker serving the buffer, 0 when none. */
	pid_t		worker_pid;
	uint64		size;
	uint64		importers;
	char		backend[HAL_PG_NAME_MAX];
	char		handle[HAL_PG_TEXT_MAX];
	/* Imports made by every process since the server started. */
	pg_atomic_uint64 imports;
}			HalPgShared;

void		_PG_init(void);
PGDLLEXPORT void hal_pg_worker_main(Datum arg);

static HalPgShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* GUCs (set at server start). */
static char *hal_pg_backend = NULL;
static int	hal_pg_size_mb = 64;
static int	hal_pg_restart_seconds = 5;

/* This process's import of the buffer. */
static hal_memory *imported = NULL;
static uint64 imported_generation = 0;
static uint64 imported_size = 0;
static uint64 first_import_us = 0;
static bool exit_callback_set = false;

/* The worker's SIGTERM. */
static volatile sig_atomic_t got_sigterm = false;

static uint64
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000000 + (uint64) ts.tv_nsec / 1000;
}

/* Report a failed hal call as an SQL error with hal's own message. */
static void
hal_error(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("hal_pg: %s failed: %s", what, hal_last_error())));
}

static void
hal_pg_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(HalPgShared)));
}

static void
hal_pg_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("hal_pg", sizeof(HalPgShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(HalPgShared));
		SpinLockInit(&shared->mutex);
		pg_atomic_init_u64(&shared->imports, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errmsg("hal_pg must be loaded by shared_preload_libraries"),
				 errhint("Add hal_pg to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineCustomStringVariable("hal_pg.backend",
							   "The hal backend of the shared buffer: auto, cuda-uvm, cpu-shm, or another name hal_backends() lists.",
							   "auto takes cuda-uvm where it opens a device, cpu-shm otherwise.",
							   &hal_pg_backend, "auto", PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("hal_pg.size_mb",
							"Size of the shared buffer in MiB.",
							NULL, &hal_pg_size_mb, 64, 1, 1024 * 1024,
							PGC_POSTMASTER, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("hal_pg.restart_seconds",
							"Seconds the postmaster waits before restarting a stopped buffer worker.",
							NULL, &hal_pg_restart_seconds, 5, 1, 3600,
							PGC_POSTMASTER, GUC_UNIT_S, NULL, NULL, NULL);
	MarkGUCPrefixReserved("hal_pg");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = hal_pg_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = hal_pg_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = hal_pg_restart_seconds;
	snprintf(worker.bgw_name, BGW_MAXLEN, "hal_pg buffer worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "hal_pg buffer worker");
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "hal_pg");
	{
		/*
		 * The worker loads this library again by name: where it was loaded
		 * by path (shared_preload_libraries = '/path/hal_pg.so'), by that
		 * path.
		 */
		Dl_info		self;

		if (dladdr((void *) _PG_init, &self) != 0 && self.dli_fname != NULL &&
			self.dli_fname[0] == '/' && strlen(self.dli_fname) < BGW_MAXLEN)
			strlcpy(worker.bgw_library_name, self.dli_fname, BGW_MAXLEN);
	}
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "hal_pg_worker_main");
	RegisterBackgroundWorker(&worker);
}

/* ---- the worker ---- */

static void
hal_pg_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/* The worker leaves: nothing published names its buffer any more. */
static void
hal_pg_unpublish(int code, Datum arg)
{
	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->worker_pid == MyProcPid)
	{
		shared->worker_pid = 0;
		shared->importers = 0;
		shared->handle[0] = '\0';
	}
	SpinLockRelease(&shared->mutex);
}

/* Open the configured backend's device 0 and allocate the buffer there. */
static hal_memory *
worker_allocate(char *backend_out)
{
	const char *names[2] = {NULL, NULL};
	hal_device *device = NULL;
	hal_memory *memory = NULL;
	uint64		size = (uint64) hal_pg_size_mb * 1024 * 1024;
	int			i;

	if (strcmp(hal_pg_backend, "auto") == 0)
	{
		names[0] = "cuda-uvm";
		names[1] = "cpu-shm";
	}
	else
		names[0] = hal_pg_backend;

	for (i = 0; i < 2 && names[i] != NULL; i++)
	{
		hal_location loc = strcmp(names[i], "cpu-shm") == 0 ? HAL_LOCATION_HOST : HAL_LOCATION_MANAGED;

		if (hal_device_open(names[i], 0, &device) != HAL_OK)
		{
			ereport(LOG,
					(errmsg("hal_pg: backend %s: %s", names[i], hal_last_error())));
			continue;
		}
		if (hal_alloc(device, size, loc, &memory) != HAL_OK)
		{
			ereport(LOG,
					(errmsg("hal_pg: %llu bytes on %s: %s",
							(unsigned long long) size, names[i], hal_last_error())));
			hal_device_release(device);
			device = NULL;
			continue;
		}
		strlcpy(backend_out, names[i], HAL_PG_NAME_MAX);
		/* The memory keeps what it needs of its device. */
		hal_device_release(device);
		return memory;
	}
	ereport(FATAL,
			(errmsg("hal_pg: no backend could allocate the shared buffer (hal_pg.backend = %s)",
					hal_pg_backend)));
	return NULL;
}

void
hal_pg_worker_main(Datum arg)
{
	hal_memory *memory;
	hal_export_options opts;
	char	   *text = NULL;
	char		backend[HAL_PG_NAME_MAX];
	uint64		size;

	pqsignal(SIGTERM, hal_pg_sigterm);
	BackgroundWorkerUnblockSignals();

	memory = worker_allocate(backend);
	if (hal_memory_size(memory, &size) != HAL_OK)
		hal_error("hal_memory_size");

	memset(&opts, 0, sizeof(opts));
	opts.size = sizeof(opts);
	/*
	 * Every backend runs as the server's user: the exporter's broker hands
	 * the buffer to processes of that user only, however many there are.
	 */
	opts.importers_kind = HAL_IMPORTERS_SAME_USER;
	if (hal_export(memory, &opts, &text) != HAL_OK)
		hal_error("hal_export");
	if (strlen(text) >= HAL_PG_TEXT_MAX)
		ereport(FATAL, (errmsg("hal_pg: the handle's text is longer than %d bytes", HAL_PG_TEXT_MAX)));

	before_shmem_exit(hal_pg_unpublish, (Datum) 0);
	SpinLockAcquire(&shared->mutex);
	/* Unique across restarts: this worker's pid and start time. */
	shared->generation = ((uint64) MyProcPid << 32) ^ now_us();
	if (shared->generation == 0)
		shared->generation = 1;
	shared->worker_pid = MyProcPid;
	shared->size = size;
	shared->importers = 0;
	strlcpy(shared->backend, backend, HAL_PG_NAME_MAX);
	strlcpy(shared->handle, text, HAL_PG_TEXT_MAX);
	SpinLockRelease(&shared->mutex);
	hal_string_free(text);
	ereport(LOG,
			(errmsg("hal_pg: %llu-byte buffer on %s published",
					(unsigned long long) size, backend)));

	while (!got_sigterm)
	{
		size_t		importers = 0;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 HAL_PG_TICK_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (hal_importers(memory, &importers) == HAL_OK)
		{
			SpinLockAcquire(&shared->mutex);
			shared->importers = importers;
			SpinLockRelease(&shared->mutex);
		}
	}
	hal_pg_unpublish(0, (Datum) 0);
	hal_memory_release(memory);
	/* Exit code 1: the postmaster starts a new worker after restart_seconds. */
	proc_exit(1);
}

/* ---- the backends ---- */

static void
hal_pg_release_import(int code, Datum arg)
{
	if (imported != NULL)
	{
		hal_memory_release(imported);
		imported = NULL;
		imported_generation = 0;
	}
}

/* The buffer, imported on this process's first call and kept. */
static hal_memory *
buffer(void)
{
	uint64		generation;
	pid_t		worker;
	char		text[HAL_PG_TEXT_MAX];
	hal_memory *memory = NULL;
	uint64		size = 0;
	uint64		started;

	if (shared == NULL)
		ereport(ERROR,
				(errmsg("hal_pg is not loaded by shared_preload_libraries"),
				 errhint("Add hal_pg to shared_preload_libraries and restart the server.")));

	SpinLockAcquire(&shared->mutex);
	generation = shared->generation;
	worker = shared->worker_pid;
	if (worker != 0 && generation != imported_generation)
		strlcpy(text, shared->handle, HAL_PG_TEXT_MAX);
	SpinLockRelease(&shared->mutex);

	if (worker == 0 || (kill(worker, 0) != 0 && errno == ESRCH))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("hal_pg: the shared buffer's background worker is not running"),
				 errdetail("PostgreSQL starts a new one within hal_pg.restart_seconds (%d s) of the last one's exit.",
						   hal_pg_restart_seconds),
				 errhint("Try again in a moment: the next call imports the new buffer.")));

	if (generation == imported_generation && imported != NULL)
		return imported;

	/* A new buffer: let go of the old one first. */
	hal_pg_release_import(0, (Datum) 0);
	started = now_us();
	if (hal_import(text, NULL, &memory) != HAL_OK)
		hal_error("importing the shared buffer");
	if (hal_memory_size(memory, &size) != HAL_OK)
	{
		hal_memory_release(memory);
		hal_error("hal_memory_size");
	}
	if (first_import_us == 0)
		first_import_us = Max(now_us() - started, 1);
	imported = memory;
	imported_generation = generation;
	imported_size = size;
	pg_atomic_fetch_add_u64(&shared->imports, 1);
	if (!exit_callback_set)
	{
		on_proc_exit(hal_pg_release_import, (Datum) 0);
		exit_callback_set = true;
	}
	return imported;
}

static void
check_range(int64 offset, int64 len)
{
	if (offset < 0 || len < 0 || (uint64) offset > imported_size ||
		(uint64) len > imported_size - (uint64) offset)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("hal_pg: bytes %lld..%lld are outside the %llu-byte buffer",
						(long long) offset, (long long) offset + (long long) len,
						(unsigned long long) imported_size)));
}

PG_FUNCTION_INFO_V1(hal_pg_write);
Datum
hal_pg_write(PG_FUNCTION_ARGS)
{
	int64		offset = PG_GETARG_INT64(0);
	bytea	   *data = PG_GETARG_BYTEA_PP(1);
	hal_memory *memory = buffer();

	check_range(offset, VARSIZE_ANY_EXHDR(data));
	if (hal_write(memory, (uint64) offset, VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data)) != HAL_OK)
		hal_error("hal_write");
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(hal_pg_read);
Datum
hal_pg_read(PG_FUNCTION_ARGS)
{
	int64		offset = PG_GETARG_INT64(0);
	int32		len = PG_GETARG_INT32(1);
	hal_memory *memory = buffer();
	bytea	   *out;

	check_range(offset, len);
	out = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(out, VARHDRSZ + len);
	if (len > 0 && hal_read(memory, (uint64) offset, VARDATA(out), (size_t) len) != HAL_OK)
		hal_error("hal_read");
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(hal_pg_checksum);
Datum
hal_pg_checksum(PG_FUNCTION_ARGS)
{
	hal_memory *memory = buffer();
	unsigned char *chunk = palloc(HAL_PG_CHUNK);
	uint64		hash = UINT64CONST(0xcbf29ce484222325);	/* FNV-1a, 64 bits */
	uint64		at;

	for (at = 0; at < imported_size; at += HAL_PG_CHUNK)
	{
		size_t		n = Min((uint64) HAL_PG_CHUNK, imported_size - at);
		size_t		i;

		CHECK_FOR_INTERRUPTS();
		if (hal_read(memory, at, chunk, n) != HAL_OK)
			hal_error("hal_read");
		for (i = 0; i < n; i++)
		{
			hash ^= chunk[i];
			hash *= UINT64CONST(0x100000001b3);
		}
	}
	pfree(chunk);
	PG_RETURN_INT64((int64) hash);
}

PG_FUNCTION_INFO_V1(hal_pg_info);
Datum
hal_pg_info(PG_FUNCTION_ARGS)
{
	char		backend[HAL_PG_NAME_MAX];
	uint64		size;
	uint64		importers;
	uint64		generation;
	pid_t		worker;

	(void) buffer();
	SpinLockAcquire(&shared->mutex);
	strlcpy(backend, shared->backend, HAL_PG_NAME_MAX);
	size = shared->size;
	importers = shared->importers;
	generation = shared->generation;
	worker = shared->worker_pid;
	SpinLockRelease(&shared->mutex);

	PG_RETURN_TEXT_P(cstring_to_text(psprintf(
		"backend=%s size=%llu importers=%llu worker_pid=%d generation=%llu imports=%llu first_import_us=%llu",
		backend, (unsigned long long) size, (unsigned long long) importers, (int) worker,
		(unsigned long long) generation,
		(unsigned long long) pg_atomic_read_u64(&shared->imports),
		(unsigned long long) first_import_us)));
}
