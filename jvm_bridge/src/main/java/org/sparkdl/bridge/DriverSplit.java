package org.sparkdl.bridge;

import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The driver reduce's update on two threads: elements {@code [0, mid)} on the caller, {@code [mid, n)} on one
 * helper thread. While the driver sums and updates, every gradient task of the iteration waits for the result, so
 * on a local master their cores are idle. Each element's arithmetic depends on no other element (the optimizer
 * update, the finiteness test), so the result is bitwise that of one thread.
 */
final class DriverSplit {
    /** Blocks smaller than this run on the caller alone (a hand-off costs tens of microseconds). */
    static final int MIN_ELEMENTS = 1 << 15;

    private static final ExecutorService HELPER = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "sparkdl-driver-reduce");
        t.setDaemon(true);
        return t;
    });

    /** A range's work; returns whether its elements are all finite. */
    interface Range {
        boolean run(int from, int to);
    }

    private DriverSplit() {
    }

    /** {@code body} over {@code [0, n)}, split in two when {@code n >= MIN_ELEMENTS} and two cores exist; true
     * when both halves returned true. An exception of either half is rethrown. */
    static boolean all(int n, Range body) {
        if (n < MIN_ELEMENTS || Runtime.getRuntime().availableProcessors() < 2) {
            return body.run(0, n);
        }
        int mid = (n / 2) & ~15;
        Future<Boolean> other = HELPER.submit(() -> body.run(mid, n));
        boolean mine = body.run(0, mid);
        try {
            return other.get() & mine;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("sparkdl bridge: interrupted during the driver reduce", e);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof RuntimeException) {
                throw (RuntimeException) cause;
            }
            if (cause instanceof Error) {
                throw (Error) cause;
            }
            throw new IllegalStateException(cause);
        }
    }
}
