package org.sparkdl.bridge;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.storage.StorageLevel;
import org.apache.spark.util.RpcUtils;

import scala.Tuple2;

/**
 * The driver side of one {@code DistributedTrainer.fit} whose AllReduce runs on the JVM: one call of
 * {@link #step} runs one iteration as one Spark job (Python gradient tasks, then JVM reduce tasks that
 * sum, update and cache the optimizer state). Python reads weights and states only when it needs them
 * (validation, snapshots, checkpoints, the end).
 *
 * <p>Two reduce modes: with {@code driverReduce} (one AllReduce block, i.e. models under ~1M parameters)
 * the job has one stage, the gradient records are collected to the driver and summed and applied here, the
 * optimizer state lives on the driver, and the new weights travel to the next iteration's tasks inside them or
 * as a broadcast; otherwise JVM reduce tasks do it next to their cached states and keep the new weights on their
 * executors ({@link ResidentWeights}), where the next iteration's tasks fetch them: the driver receives only
 * the reduce tasks' small results. The arithmetic is the same ({@link BlockReducer}), so both modes give
 * bit-identical results.
 *
 * <p>Two gradient sources: "full" runs one task per cached data partition with its data records
 * appended (the first iteration, and whenever an executor lacks a local copy); "local" runs one task per
 * group of co-located partitions that reads executor-local copies.
 */
public final class TrainingLoop {
    public static final int OK = 0;
    public static final int NONFINITE_LOSS = 1;
    public static final int NONFINITE_WEIGHTS = 2;

    private final JavaSparkContext jsc;
    private final JavaRDD<byte[]> data;
    private final long[] bounds;
    private final long[] sizes;
    private final IterationContext context = new IterationContext();
    private final JavaRDD<byte[]> fullSource;
    private final GroupSourceRDD localSource;
    private JavaRDD<byte[]> fullGradients;
    private JavaRDD<byte[]> localGradients;
    /** {@link #localGradients} in barrier mode, for {@link #run}: its tasks wait for each other every iteration,
     * so they must all run at once, which Spark guarantees (or refuses) for a barrier stage. */
    private JavaRDD<byte[]> localBarrierGradients;
    private final boolean localEnabled;
    private final boolean driverReduce;
    private boolean localReady;
    /** Gradient records per block the group tasks of the local source send ({@link GroupAssignment#records}). */
    private int localRecords;

    /** The buffers' values (running statistics), kept for iterations that do not update them. */
    private float[] buffers = new float[0];
    /**
     * Driver reduce: the weights the next iteration's tasks read (packed parameters and buffers, in chunks cut at
     * the blocks: one array per block, none of them the whole model).
     */
    private byte[][] currentBytes;
    /** Driver reduce: their broadcast, or null when they travel inside the tasks. */
    private Broadcast<byte[][]> current;
    /** Executor reduce: the weights the next iteration's tasks read, kept on the executors, and the broadcast
     * whose id their blocks carry (destroying it releases them everywhere). */
    private ResidentWeights resident;
    private Broadcast<Integer> anchor;
    /** The optimizer states, cached and local-checkpointed by the job that computed them (their lineage ends
     * there, so it holds no broadcast of earlier weights). */
    private JavaRDD<ShardState> states;
    /** The broadcasts {@link #states} reads when they come from {@link #commitStates} (destroyed once an
     * iteration's cached states replace them), else empty. */
    private List<Broadcast<ShardState>> stateSources = List.of();
    /** Largest byte array of weights (sparkdl/chunking.py MAX_CHUNK_BYTES); 1/16 of it is the largest model whose
     * states are read in one job ({@link #writeTemp}). */
    private final int maxChunkBytes;
    /** The optimizer state of the one block in driver-reduce mode. */
    private ShardState driverState;

    /**
     * @param data the cached training data (the Python RDD's JVM side, one record batch per partition)
     * @param bounds int64 little-endian block boundaries, K + 1 values
     * @param sizes int64 little-endian sample counts per data partition
     * @param groups number of group tasks of the local source (task slots); 0: never use local copies
     * @param driverReduce sum and update on the driver (requires one block)
     * @param maxChunkBytes largest byte array of weights (a multiple of 4)
     */
    TrainingLoop(JavaSparkContext jsc, JavaRDD<byte[]> data, byte[] bounds, byte[] sizes, int groups,
                 boolean driverReduce, int maxChunkBytes) {
        if (maxChunkBytes < 4 || maxChunkBytes % 4 != 0) {
            throw new IllegalArgumentException("sparkdl bridge: chunk limit " + maxChunkBytes + " is not a positive "
                    + "multiple of 4");
        }
        this.maxChunkBytes = maxChunkBytes;
        this.jsc = jsc;
        this.data = data;
        this.bounds = longs(bounds);
        this.sizes = longs(sizes);
        if (this.sizes.length != data.getNumPartitions()) {
            throw new IllegalArgumentException("sparkdl bridge: " + this.sizes.length + " partition sizes for "
                    + data.getNumPartitions() + " partitions");
        }
        if (driverReduce && this.bounds.length != 2) {
            throw new IllegalArgumentException("sparkdl bridge: driver reduce needs one block, got "
                    + (this.bounds.length - 1));
        }
        this.driverReduce = driverReduce;
        this.fullSource = data.mapPartitionsWithIndex(new IterationContext.Prepend(context), true);
        this.localEnabled = groups > 0;
        this.localSource = new GroupSourceRDD(jsc.sc(), context, Math.max(1, Math.min(groups, this.sizes.length)));
    }

    public JavaRDD<byte[]> fullSource() {
        return fullSource;
    }

    public JavaRDD<byte[]> localSource() {
        return localSource.toJavaRDD();
    }

    /** The Python gradient RDDs over {@link #fullSource} and {@link #localSource} (raw records out). */
    public void setGradients(JavaRDD<byte[]> full, JavaRDD<byte[]> local, JavaRDD<byte[]> localBarrier) {
        this.fullGradients = full;
        this.localGradients = local;
        this.localBarrierGradients = localBarrier;
    }

    public int numBlocks() {
        return bounds.length - 1;
    }

    // ------------------------------------------------------------------ weights and states

    /** Where Python writes the next weights or states ({@link #uploadFile}). */
    private final Upload upload = new Upload();

    /**
     * A new empty file, readable and writable by this user only, for Python to write the weights or states into
     * before {@link #commitWeights} or {@link #commitStates}, which read and delete it; returns its path.
     */
    public String uploadFile() {
        return upload.create();
    }

    /**
     * The uploaded file ({@link #uploadFile}) holds the weights: {@code floats} float32 little-endian values,
     * {@code numParameters} parameters then buffers. They are read into one array per AllReduce block (the layout
     * {@link #commit} keeps) and the buffers.
     */
    public void commitWeights(long floats, int numParameters) {
        int k = numBlocks();
        if (numParameters != bounds[k] || floats < numParameters) {
            throw new IllegalArgumentException("sparkdl bridge: " + numParameters + " parameters of " + floats
                    + " weights, blocks cover " + bounds[k]);
        }
        byte[][] parts = new byte[k + 1][];
        for (int i = 0; i < k; i++) {
            parts[i] = new byte[Math.toIntExact(4 * (bounds[i + 1] - bounds[i]))];
        }
        parts[k] = new byte[Math.toIntExact(4 * (floats - numParameters))];
        upload.read(in -> {
            for (byte[] part : parts) {
                Upload.readFully(in, part);
            }
            return null;
        });
        buffers = Frames.floats(parts[k], 0, parts[k].length / 4);
        if (driverReduce) {
            publish(Frames.chunks(parts, maxChunkBytes));
            return;
        }
        Broadcast<Integer> a = newAnchor();
        ResidentWeights w = new ResidentWeights(a.id(), k, maxChunkBytes);
        for (int i = 0; i < k; i++) {
            w.putShard(i, parts[i]);  // in the driver's block manager until the first iteration replaces them
        }
        w.putBuffers(parts[k]);
        publish(a, w);
    }

    /**
     * Weights up to this size travel inside the tasks (Spark serializes each job's tasks anyway) when the
     * driver reduces: one broadcast less to create and destroy per iteration. Larger ones are broadcast.
     */
    static final int INLINE_WEIGHT_BYTES = 512 * 1024;

    /** Driver reduce: make {@code packed} the weights of the next iteration and release the previous broadcast. */
    private void publish(byte[][] packed) {
        if (current != null) {
            current.destroy(false);
        }
        long bytes = 0;
        for (byte[] c : packed) {
            bytes += c.length;
        }
        currentBytes = packed;
        current = bytes <= INLINE_WEIGHT_BYTES ? null : broadcast(packed, byte[][].class, false);
    }

    /** Executor reduce: a new version of the resident weights gets the id of this (tiny) broadcast. */
    private Broadcast<Integer> newAnchor() {
        return broadcast(numBlocks(), Integer.class, false);
    }

    /**
     * Executor reduce: make {@code weights} the weights of the next iteration and release the previous version's
     * blocks, waiting until every block manager has dropped them (Spark's default returns before).
     */
    private void publish(Broadcast<Integer> a, ResidentWeights weights) {
        if (anchor != null) {
            anchor.destroy(true);
        }
        anchor = a;
        resident = weights;
    }

    /** {@code value} broadcast; {@code serializedOnly}: the driver keeps only its serialized pieces (off local mode). */
    @SuppressWarnings("unchecked")
    private <T> Broadcast<T> broadcast(T value, Class<T> type, boolean serializedOnly) {
        return jsc.sc().broadcastInternal(value, serializedOnly,
                (scala.reflect.ClassTag<T>) scala.reflect.ClassTag$.MODULE$.apply(type));
    }



    /**
     * The uploaded file ({@link #uploadFile}) holds the optimizer states ({@link StateCodec} layout), which replace
     * the cached ones. With the executor reduce each block's state is broadcast as it is decoded and the reduce
     * task of block k reads broadcast k: inside a task (a parallelized collection) a 100M-parameter model's states
     * were hundreds of MB of task bytes serialized in the driver's scheduler thread, over Spark's RPC message limit
     * and out of its heap.
     */
    public void commitStates() {
        if (driverReduce) {
            driverState = upload.read(in -> StateCodec.read(in, bounds)).get(0);
        } else {
            List<Broadcast<ShardState>> sources = new ArrayList<>(numBlocks());
            upload.read(in -> {
                StateCodec.read(in, bounds, s -> sources.add(broadcast(s.compact(), ShardState.class, true)));
                return null;
            });
            List<Integer> blocks = new ArrayList<>(sources.size());
            for (int k = 0; k < sources.size(); k++) {
                blocks.add(k);
            }
            replaceStates(jsc.parallelize(blocks, blocks.size()).map(new Jobs.StateOf(sources)), sources);
        }
        localReady = false;
    }

    /**
     * The weights ({@code what} "weights": parameters then buffers, float32 little-endian) or the optimizer states
     * ("states", {@link StateCodec}'s layout) written to a new temporary file that only this user can read; returns
     * its path, and the caller deletes it. py4j moves a byte array as base64 text at ~10 MB/s, a local file is far
     * faster (the driver's Python and JVM always share a host). The JVM chooses the file: no path from Python is
     * ever written to. The states of a model over 1/16 of the chunk limit (64 MiB of parameters by default) arrive
     * one block at a time ({@code toLocalIterator}, a job per block) and go straight to the file: a 100M-parameter model's momentum collected whole, then packed, ran a
     * 1280 MB driver out of heap.
     */
    public String writeTemp(String what) {
        if (!"weights".equals(what) && !"states".equals(what)) {
            throw new IllegalArgumentException("sparkdl bridge: nothing called " + what + " to write");
        }
        try {
            Path path = Files.createTempFile("sparkdl-" + what + "-", ".bin"); // rw------- on POSIX file systems
            try (java.io.OutputStream out = new java.io.BufferedOutputStream(Files.newOutputStream(path), 1 << 16)) {
                if ("weights".equals(what) && !driverReduce) {
                    resident.writeTo(out);  // fetched from the executors block by block
                } else if ("weights".equals(what)) {
                    for (byte[] chunk : currentBytes) {
                        out.write(chunk);
                    }
                } else {
                    JavaRDD<ShardState> only = driverReduce ? null : states.map(new Jobs.StateOnly());
                    Iterator<ShardState> each = driverReduce ? List.of(driverState).iterator()
                            : 4L * bounds[numBlocks()] <= maxChunkBytes / 16 ? Jobs.collect(jsc, only).iterator()
                            : only.toLocalIterator();
                    StateCodec.write(numBlocks(), each, bounds, out);
                }
            }
            return path.toString();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Forget the executor-local copies (after a failure): the next iteration runs on the full data. */
    public void invalidateLocalCopies() {
        localReady = false;
    }

    // ------------------------------------------------------------------ one iteration

    /**
     * Run one iteration. Returns int32 status ({@link #OK}, {@link #NONFINITE_LOSS},
     * {@link #NONFINITE_WEIGHTS}; on a non-finite result nothing is committed), int32 source (0 local copies,
     * 1 full data, 2 full data after a local copy was missing),
     * float64 loss sum, float64 normalizer sum, int64 samples.
     */
    public byte[] step(int epoch, int iteration, int globalIteration, byte[] program) {
        long t0 = System.nanoTime();
        UpdateProgram prog = new UpdateProgram(program);
        if (prog.numBlocks() != numBlocks()) {
            throw new IllegalArgumentException("sparkdl bridge: update program for " + prog.numBlocks() + " blocks");
        }
        context.epoch = epoch;
        context.iteration = iteration;
        context.globalIteration = globalIteration;
        context.weights = current;
        context.inlineWeights = current == null ? currentBytes : null;
        context.resident = resident;
        int full = localReady ? 0 : 1;
        Attempt a = localReady ? run(localGradients, prog) : null;
        if (a == null || a.missed) {
            full = a == null ? 1 : 2;
            a = run(fullGradients, prog);
            if (a.missed) {
                a.discard();
                throw new IllegalStateException("sparkdl bridge: a partition had no data in a full iteration");
            }
            assignGroups();
        }
        long t1 = System.nanoTime();
        byte[] out = commit(a, full);
        long t2 = System.nanoTime();
        timings[0] += t1 - t0 - a.jobNanos - a.reduceNanos;
        timings[1] += a.jobNanos;
        timings[2] += a.reduceNanos;
        timings[3] += t2 - t1;
        timings[4]++;
        return out;
    }

    /**
     * Driver-side nanoseconds summed over iterations: [outside jobs before commit, in jobs, driver reduce,
     * commit, count].
     */
    private final long[] timings = new long[5];

    /**
     * "before_jobs_ms jobs_ms driver_reduce_ms commit_ms iterations" summed since the last call (benchmarks),
     * then reset.
     */
    public String takeTimings() {
        String out = String.format("%.3f %.3f %.3f %.3f %d", timings[0] / 1e6, timings[1] / 1e6,
                timings[2] / 1e6, timings[3] / 1e6, timings[4]);
        Arrays.fill(timings, 0);
        return out;
    }

    private static final class Attempt {
        long jobNanos;
        long reduceNanos;
        /** The new cached states and weights (executor reduce only). */
        JavaRDD<ShardState> next;
        Broadcast<Integer> anchor;
        ResidentWeights weights;
        ShardState[] results;
        boolean missed;

        void discard() {
            if (next != null) {
                next.unpersist(false);
            }
            if (anchor != null) {
                anchor.destroy(true);
            }
        }
    }

    private Attempt run(JavaRDD<byte[]> gradients, UpdateProgram prog) {
        return driverReduce ? reduceOnDriver(gradients, prog) : reduceOnExecutors(gradients, prog);
    }

    /** Whether the last driver-reduce attempt ran the combine stage (tests). */
    private boolean lastCombined;

    /** One stage (two with a combine stage): collect the gradient records, then sum and update here. */
    private Attempt reduceOnDriver(JavaRDD<byte[]> gradients, UpdateProgram prog) {
        Attempt a = new Attempt();
        long start = System.nanoTime();
        int records = gradients == localGradients ? localRecords : FanIn.nonEmpty(sizes);
        JavaRDD<byte[]> collected = FanIn.of(jsc, gradients, records, sizes.length);
        lastCombined = collected != gradients;
        List<byte[]> frames = Jobs.collect(jsc, collected);
        long received = System.nanoTime();
        a.jobNanos = received - start;
        List<Tuple2<Integer, byte[]>> keyed = new ArrayList<>(frames.size());
        for (byte[] f : frames) {
            keyed.add(new Tuple2<>(0, f));
        }
        ShardState next = new BlockReducer(prog, currentBytes, bounds)
                .call(keyed.iterator(), List.of(driverState).iterator()).next();
        a.results = new ShardState[] {next};
        a.missed = next.missed;
        a.reduceNanos = System.nanoTime() - received;
        return a;
    }

    /** Whether the last iteration's gradient records went through the combine stage (driver reduce only). */
    public boolean lastCombined() {
        return lastCombined;
    }

    private Attempt reduceOnExecutors(JavaRDD<byte[]> gradients, UpdateProgram prog) {
        int k = numBlocks();
        JavaPairRDD<Integer, byte[]> keyed = gradients.mapToPair(new Jobs.KeyByBlock())
                .partitionBy(new BlockPartitioner(k));
        Attempt a = new Attempt();
        a.anchor = newAnchor();
        a.weights = new ResidentWeights(a.anchor.id(), k, maxChunkBytes);
        a.next = keyed.zipPartitions(states, new BlockReducer(prog, resident, a.weights, bounds));
        a.next.persist(StorageLevel.MEMORY_AND_DISK());
        a.next.rdd().localCheckpoint();
        long start = System.nanoTime();
        List<ShardState> collected;
        try {
            collected = Jobs.collect(jsc, a.next.map(new Jobs.ResultOf()));
        } catch (RuntimeException e) {
            a.discard();
            throw e;
        }
        a.jobNanos = System.nanoTime() - start;
        a.results = new ShardState[k];
        for (ShardState s : collected) {
            a.results[s.block] = s;
            a.missed |= s.missed;
        }
        if (a.missed) {
            a.discard();
        }
        return a;
    }

    // ------------------------------------------------------------------ several iterations in one job

    /**
     * Run the iterations of {@code plan} in one Spark job: the group tasks over executor-local copies loop over
     * them, meeting at a {@link Rendezvous} on this driver after each (their {@link TaskLink}s), where the driver
     * reduce sums and updates exactly as {@link #step} does, so the results are bitwise those of one job per
     * iteration. Saves a job's scheduling and task launch per iteration (~15-40 ms on local[2]).
     *
     * <p>Only in driver-reduce mode once the local copies are in place; otherwise nothing runs (the caller uses
     * {@link #step}). The job stops early at an iteration whose loss or weights are not finite (not committed) or
     * that lacked a local copy (not run; the next {@link #step} reruns it on the full data). If the job fails the
     * exception is rethrown and the weights are those of its last committed iteration (the caller replays from its
     * snapshot, or stops at a diverged iteration with the last good weights) — unless no task ever reached the
     * driver: then nothing ran, multi-iteration jobs are off for this loop, and the caller runs the iteration alone.
     *
     * @param plan int32 n, then per iteration int32 epoch | int32 iteration in epoch | int32 global iteration |
     *             int32 length | {@link UpdateProgram} bytes
     * @return int32 iterations that ran | int32 flags: 1 the job stopped at an iteration without a local copy,
     *         2 multi-iteration jobs are off for this loop (one failed before any task reached the driver: e.g. a
     *         cluster that refuses barrier stages), 4 not possible now ({@link #fanInFits}) | for each iteration
     *         that ran the 32 bytes {@link #step} returns (source 0)
     */
    public byte[] run(byte[] plan) {
        ByteBuffer in = Frames.wrap(plan);
        int n = in.getInt();
        if (!driverReduce || !localReady || n < 1 || inJobOff) {
            return notRun(inJobOff ? OFF : 0);
        }
        if (!fanInFits()) {
            return notRun(REFUSED);
        }
        int[][] counters = new int[n][3];
        UpdateProgram[] programs = new UpdateProgram[n];
        for (int j = 0; j < n; j++) {
            counters[j] = new int[] {in.getInt(), in.getInt(), in.getInt()};
            byte[] p = new byte[in.getInt()];
            in.get(p);
            programs[j] = new UpdateProgram(p);
        }
        InJob job = new InJob(counters, programs);
        Rendezvous r = new Rendezvous(localSource.getNumPartitions(), job::reduce);
        context.epoch = counters[0][0];
        context.iteration = counters[0][1];
        context.globalIteration = counters[0][2];
        context.weights = current;
        context.inlineWeights = current == null ? currentBytes : null;
        context.resident = null;
        context.rendezvous = r.open();
        try {
            Jobs.collect(jsc, localBarrierGradients);
        } catch (Exception e) {  // SparkException is a checked exception, which Scala's runJob throws undeclared
            if (!r.reached()) {  // it never started: the caller runs this iteration alone, and the next ones too
                inJobOff = true;
                return notRun(OFF);
            }
            throw e;
        } finally {
            context.rendezvous = null;
            r.close();
            job.publish();
        }
        if (r.failure() != null) {
            throw new IllegalStateException("sparkdl: a multi-iteration job's rendezvous failed", r.failure());
        }
        return job.results();
    }

    /** Multi-iteration jobs are off for this loop ({@link #run}). */
    private boolean inJobOff;

    /** {@link #run}'s flags when nothing ran: off for this loop, or not possible now (see {@link #fanInFits}). */
    private static final int OFF = 2;
    private static final int REFUSED = 4;

    private static byte[] notRun(int flags) {
        return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putInt(0).putInt(flags).array();
    }

    /**
     * Whether a multi-iteration job can run now: the driver may receive every group task's records directly (at
     * most {@link FanIn#PER_EXECUTOR} records per executor, else the per-iteration jobs' combine stage keeps the
     * driver's fan-in bounded; a local master is exempt, its one executor being the driver; all of them within half
     * of Spark's RPC message limit), and the application has a task slot for every group task (fewer executors
     * than when the groups were made, or groups made for more slots than there are: Spark would refuse to launch
     * the barrier stage), and dynamic allocation is off (Spark runs no barrier stage with it).
     */
    private boolean fanInFits() {
        long bytes = (long) localRecords * (4L * bounds[1] + Frames.HEADER);
        return !org.apache.spark.util.Utils.isDynamicAllocationEnabled(jsc.sc().conf())  // no barrier stages there
                && (jsc.sc().isLocal() || localRecords <= FanIn.PER_EXECUTOR * FanIn.executors(jsc))
                && bytes <= RpcUtils.maxMessageSizeBytes(jsc.sc().conf()) / 2
                && localSource.getNumPartitions() <= jsc.sc().maxNumConcurrentTasks(
                        jsc.sc().resourceProfileManager().defaultResourceProfile());
    }

    /** The driver's side of one {@link #run}: the iterations' reduce, run by the {@link Rendezvous}. */
    private final class InJob {
        private final int[][] counters;
        private final UpdateProgram[] programs;
        private final byte[][] startBytes = currentBytes;
        private final ByteBuffer results;
        private int ran;
        private boolean missed;

        InJob(int[][] counters, UpdateProgram[] programs) {
            this.counters = counters;
            this.programs = programs;
            this.results = ByteBuffer.allocate(8 + 32 * counters.length).order(ByteOrder.LITTLE_ENDIAN);
            results.putInt(0).putInt(0);
        }

        /** Iteration {@code ran}'s records of every task: sum, update, and the reply every task receives. */
        synchronized byte[][] reduce(List<byte[]> frames) {
            List<Tuple2<Integer, byte[]>> keyed = new ArrayList<>(frames.size());
            for (byte[] f : frames) {
                keyed.add(new Tuple2<>(0, f));
            }
            ShardState next = new BlockReducer(programs[ran], currentBytes, bounds)
                    .call(keyed.iterator(), List.of(driverState).iterator()).next();
            if (next.missed) {
                localReady = false;
                missed = true;
                return reply(TaskLink.STOP);
            }
            int status = status(new ShardState[] {next});
            results.putInt(status).putInt(0).putDouble(next.lossSum).putDouble(next.normalizerSum).putLong(next.count);
            ran++;
            if (status != OK) {
                return reply(TaskLink.STOP);
            }
            commitDriver(next);
            return ran == counters.length ? reply(TaskLink.STOP) : reply(TaskLink.CONTINUE);
        }

        private byte[][] reply(int what) {
            ByteBuffer h = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putInt(what);
            if (what != TaskLink.CONTINUE) {
                return new byte[][] {h.array()};
            }
            int[] c = counters[ran];
            h.putInt(c[0]).putInt(c[1]).putInt(c[2]);
            byte[][] out = new byte[currentBytes.length + 1][];
            out[0] = h.array();
            System.arraycopy(currentBytes, 0, out, 1, currentBytes.length);
            return out;
        }

        /** The last committed iteration's weights become the next job's (also when this job failed later on: the
         * caller then either replays from a snapshot, which replaces them, or stops at a diverged iteration, whose
         * last good weights these are, as with one job per iteration). */
        synchronized void publish() {
            if (currentBytes != startBytes) {
                TrainingLoop.this.publish(currentBytes);
            }
        }

        synchronized byte[] results() {
            results.putInt(0, ran).putInt(4, missed ? 1 : 0);
            return Arrays.copyOf(results.array(), 8 + 32 * ran);
        }
    }

    /** {@link #OK}, {@link #NONFINITE_LOSS} or {@link #NONFINITE_WEIGHTS} of an iteration's results. */
    private static int status(ShardState[] results) {
        boolean finite = true;
        for (ShardState r : results) {
            finite &= r.finite;
        }
        ShardState head = results[0];
        double loss = head.normalizerSum > 0 ? head.lossSum / head.normalizerSum : Double.NaN;
        return !Double.isFinite(loss) ? NONFINITE_LOSS : finite ? OK : NONFINITE_WEIGHTS;
    }

    /** The buffers after an iteration: the mean of its tasks' running statistics, else the previous ones. */
    private float[] nextBuffers(ShardState head) {
        if (head.bufferSum == null || head.bufferSum.length == 0 || head.count <= 0) {
            return buffers;
        }
        float[] buf = new float[head.bufferSum.length];
        float n = (float) head.count;
        for (int i = 0; i < buf.length; i++) {
            buf[i] = head.bufferSum[i] / n;
        }
        return buf;
    }

    /** Driver reduce: make a finite iteration's results the current weights, buffers and state (not published). */
    private void commitDriver(ShardState head) {
        buffers = nextBuffers(head);
        driverState = new ShardState(0, head.step, head.arrays);
        currentBytes = Frames.chunks(new byte[][] {head.shard, Frames.bytes(buffers)}, maxChunkBytes);
    }

    private byte[] commit(Attempt a, int full) {
        ShardState head = a.results[0];
        int status = status(a.results);
        if (status != OK) {
            a.discard();
        } else {
            if (driverReduce) {
                commitDriver(head);
                publish(currentBytes);
            } else {
                buffers = nextBuffers(head);
                replaceStates(a.next, List.of());
                a.weights.putBuffers(Frames.bytes(buffers));
                publish(a.anchor, a.weights);
            }
            localReady = localEnabled;
        }
        ByteBuffer out = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN);
        out.putInt(status).putInt(full).putDouble(head.lossSum).putDouble(head.normalizerSum).putLong(head.count);
        return out.array();
    }

    private void replaceStates(JavaRDD<ShardState> next, List<Broadcast<ShardState>> sources) {
        if (states != null) {
            states.unpersist(false);
        }
        for (Broadcast<ShardState> b : stateSources) {
            b.destroy(true);
        }
        states = next;
        stateSources = sources;
    }

    /** Group the data partitions by the executor that caches them ({@link GroupAssignment}). */
    private void assignGroups() {
        GroupAssignment g = GroupAssignment.of(jsc, data.rdd(), sizes, localSource.getNumPartitions());
        context.groups = g.table;
        localRecords = g.records;
        localSource.setLocations(g.where);
    }

    /** Lines of the cached state RDD's lineage (tests check that it does not grow). */
    public int statesLineageDepth() {
        return states == null ? 0 : states.toDebugString().split("\n").length;
    }

    /** Gradient records per AllReduce block that the local-copy tasks send (0 before the first iteration). */
    public int localRecords() {
        return localRecords;
    }

    /** Whether this loop reduces on the driver (one stage per iteration). */
    public boolean driverReduce() {
        return driverReduce;
    }

    /** Release the cached states and the broadcasts. */
    public void close() {
        upload.delete();
        replaceStates(null, List.of());
        driverState = null;
        if (current != null) {
            current.destroy();
        }
        if (anchor != null) {
            anchor.destroy(true);  // the weights' blocks are gone from every block manager when fit returns
        }
        current = null;
        currentBytes = null;
        anchor = null;
        resident = null;
    }

    private static long[] longs(byte[] b) {
        long[] out = new long[b.length / 8];
        Frames.wrap(b).asLongBuffer().get(out);
        return out;
    }
}
