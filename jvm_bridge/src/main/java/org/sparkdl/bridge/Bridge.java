package org.sparkdl.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Column;

/**
 * The one class sparkdl's Python side calls (through py4j, from {@code sparkdl/jvm.py} only).
 *
 * <p>Every method is static and takes or returns plain Java/Spark public-API types. Helpers live in other
 * classes of this package; this class only routes calls to them.
 */
public final class Bridge {

    private static final String VERSION = readVersion();

    private Bridge() {
    }

    /** The sparkdl version this jar was built for (written into the jar by the build). */
    public static String version() {
        return VERSION;
    }

    /**
     * Runs {@code numTasks} tasks that each load this class on their executor and report
     * {@code "<jvm name> <version>"} (the JVM name is {@code pid@host}): proves that executors, not only the
     * driver, have the bridge on their class path.
     */
    public static List<String> taskVersions(JavaSparkContext jsc, int numTasks) {
        return jsc.parallelize(Collections.nCopies(numTasks, 0), numTasks)
                .map(x -> ManagementFactory.getRuntimeMXBean().getName() + " " + Bridge.version())
                .collect();
    }

    /**
     * The driver side of one training run whose AllReduce runs on the JVM (see {@link TrainingLoop});
     * arguments as its constructor.
     */
    public static TrainingLoop trainingLoop(JavaSparkContext jsc, JavaRDD<byte[]> data, byte[] bounds, byte[] sizes,
                                            int groups, boolean driverReduce, int maxChunkBytes) {
        return new TrainingLoop(jsc, data, bounds, sizes, groups, driverReduce, maxChunkBytes);
    }

    /**
     * Files on the Hadoop file systems of the session's Hadoop configuration ({@code jsc.hadoopConfiguration()}):
     * model files, checkpoints and run outputs on {@code hdfs://}, {@code s3a://}, ... (see {@link HadoopFiles}).
     */
    public static HadoopFiles hadoopFiles(JavaSparkContext jsc) {
        return new HadoopFiles(jsc.hadoopConfiguration());
    }

    /** Files and bytes written and read through {@link HadoopFiles} in this JVM ({@link HadoopFiles#counters}). */
    public static long[] hadoopCounters() {
        return HadoopFiles.counters();
    }

    private static StageProfiler profiler;

    /** Start recording per-job, per-stage task metrics (benchmarks); replaces a running profiler. */
    public static synchronized void startProfiler(JavaSparkContext jsc) {
        stopProfiler(jsc);
        profiler = new StageProfiler();
        jsc.sc().addSparkListener(profiler);
    }

    /** Stop recording; returns the report as JSON (see {@link StageProfiler#report}), or "[]". */
    public static synchronized String stopProfiler(JavaSparkContext jsc) {
        if (profiler == null) {
            return "[]";
        }
        jsc.sc().removeSparkListener(profiler);
        String out = profiler.report();
        profiler = null;
        return out;
    }

    /** Blocks of weights kept on the executors ({@link ResidentWeights}), all versions, all block managers (tests). */
    public static int residentWeightBlocks(JavaSparkContext jsc) {
        return ResidentWeights.count(jsc);
    }

    /** This (the driver's) JVM name, {@code pid@host}. */
    public static String jvmName() {
        return ManagementFactory.getRuntimeMXBean().getName();
    }

    /**
     * {@code column} (a Vector, dense or sparse, when {@code kind} is "vector"; an {@code array<float>} or
     * {@code array<double>} for "float" or "double") as {@code binary}: each row's {@code size} values as float32,
     * little endian ({@link FloatRows}). Invalid rows (null, another number of values, null elements, NaN or
     * infinite values, sparse indices out of range or not increasing) become null, or fail the task with
     * {@code error} (its {@code {row}} replaced by the row) when {@code error} is not null.
     */
    public static Column floatRows(Column column, String kind, int size, String error) {
        return FloatRows.column(column, kind, size, error);
    }

    /**
     * Little-endian binary16 values widened to float32 (little endian) exactly as the AllReduce widens
     * {@code compress='fp16'} gradient records ({@link Frames#addPayload}); tests compare it with numpy.
     */
    public static byte[] widenHalves(byte[] halves) {
        java.nio.ByteBuffer in = Frames.wrap(halves);
        float[] out = new float[halves.length / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = Frames.widen(in.getShort(2 * i));
        }
        return Frames.bytes(out);
    }

    private static String readVersion() {
        Properties p = new Properties();
        try (InputStream in = Bridge.class.getResourceAsStream("bridge.properties")) {
            if (in == null) {
                throw new IllegalStateException("sparkdl-bridge.jar has no org/sparkdl/bridge/bridge.properties");
            }
            p.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return p.getProperty("version");
    }
}
