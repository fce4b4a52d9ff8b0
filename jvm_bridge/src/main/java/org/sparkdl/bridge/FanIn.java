package org.sparkdl.bridge;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;

/**
 * How many gradient records the driver receives per iteration when it reduces (one AllReduce block): at most
 * {@link #PER_EXECUTOR} per executor. Beyond, a combine stage of at most one JVM task per executor runs first:
 * records are keyed by their tree node at the level where there are no more nodes than executors, and task j
 * sums node j in the tree's order ({@link Jobs.Combine}, {@link NodeSums}), so the bits do not change.
 */
final class FanIn {
    /**
     * Gradient records the driver collects directly, per executor. Each is one model's bytes (float32), so the
     * driver receives at most this many times executors x model bytes of gradients per iteration.
     */
    static final int PER_EXECUTOR = 2;

    private FanIn() {
    }

    /** {@code gradients} (about {@code records} records over {@code partitions} data partitions) as collected. */
    static JavaRDD<byte[]> of(JavaSparkContext jsc, JavaRDD<byte[]> gradients, int records, int partitions) {
        int executors = executors(jsc);
        if (records <= PER_EXECUTOR * executors) {
            return gradients;
        }
        int level = 0;
        while (((partitions - 1) >> level) + 1 > executors) {
            level++;
        }
        return gradients.mapToPair(new Jobs.KeyByNode(level))
                .partitionBy(new BlockPartitioner(((partitions - 1) >> level) + 1))
                .mapPartitions(new Jobs.Combine());
    }

    /** Executors of the application (public status API; in local mode the driver is the one executor). */
    static int executors(JavaSparkContext jsc) {
        int infos = jsc.sc().statusTracker().getExecutorInfos().length;
        return Math.max(1, infos - 1);
    }

    /** Data partitions with samples: the records of an iteration over the full data. */
    static int nonEmpty(long[] sizes) {
        int n = 0;
        for (long s : sizes) {
            n += s > 0 ? 1 : 0;
        }
        return n;
    }
}
